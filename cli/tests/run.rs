//! `ferrocm run` as a user calls it: exit codes, messages that name what is
//! wrong, and the JSON summary.

use std::process::Command;

fn ferrocm(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ferrocm"))
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn runs_a_synthetic_model_and_reports_json() {
    let args = [
        "run",
        "synthetic:tiny:q8_0",
        "--device",
        "cpu",
        "--prompt-ids",
        "1,2,3",
        "--max-tokens",
        "5",
        "--temperature",
        "0",
        "--json",
    ];
    let (code, out, err) = ferrocm(&args);
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON object");
    let tokens = r["tokens"].as_array().unwrap();
    assert_eq!(tokens.len(), 5);
    assert!(tokens.iter().all(|t| t.as_u64().unwrap() < 384));
    assert_eq!(r["prompt_tokens"], 3);
    assert_eq!(r["decode_tokens"], 4);
    assert!(
        r["weight_bytes"].as_u64().unwrap() > 0 && r["decode_tokens_per_s"].as_f64().unwrap() > 0.0
    );
    // Greedy is deterministic; a seed makes sampling so too.
    assert_eq!(
        ferrocm(&args).1.split("\"tokens\"").nth(1),
        out.split("\"tokens\"").nth(1)
    );
    let sampled = [
        "run",
        "synthetic:tiny:f16",
        "--device",
        "cpu",
        "--random-prompt",
        "4",
        "--max-tokens",
        "6",
        "--seed",
        "9",
        "--json",
    ];
    let (a, b) = (ferrocm(&sampled).1, ferrocm(&sampled).1);
    let tokens =
        |s: &str| serde_json::from_str::<serde_json::Value>(s.trim()).unwrap()["tokens"].clone();
    assert_eq!(tokens(&a), tokens(&b));
}

#[test]
fn bad_requests_fail_with_a_message() {
    let (code, _, err) = ferrocm(&[
        "run",
        "/nonexistent/m.gguf",
        "--prompt-ids",
        "1",
        "--device",
        "cpu",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/m.gguf"), "{err}");
    let (code, _, err) = ferrocm(&[
        "run",
        "synthetic:tiny:q4_0",
        "--prompt",
        "hello",
        "--device",
        "cpu",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("tokenizer"), "{err}");
    let (code, _, err) = ferrocm(&[
        "run",
        "synthetic:tiny:q4_0",
        "--prompt-ids",
        "1",
        "--ctx",
        "100000",
        "--device",
        "cpu",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("100000") && err.contains("512"), "{err}");
    let (code, _, err) = ferrocm(&[
        "run",
        "synthetic:tiny:q4_0",
        "--prompt-ids",
        "1,999",
        "--device",
        "cpu",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("999"), "{err}");
    let (code, _, err) = ferrocm(&[
        "run",
        "synthetic:huge:q4_0",
        "--prompt-ids",
        "1",
        "--device",
        "cpu",
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("huge"), "{err}");
    let (code, _, _) = ferrocm(&["run", "synthetic:tiny:q4_0", "--device", "cpu"]);
    assert_eq!(code, 2, "no prompt");
}
