//! `ferrocm run` as a user calls it: exit codes, messages that name what is
//! wrong, and the JSON summary.

use ferrocm_models::{Arch, synthetic::SyntheticModel};
use ferrocm_ops::quant::gguf::{Gguf, GgufWriter};
use std::io::Write;
use std::process::{Command, Stdio};

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
        "--ignore-eos",
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
    let again: serde_json::Value = serde_json::from_str(ferrocm(&args).1.trim()).unwrap();
    assert_eq!(again["tokens"], r["tokens"]);
    assert_eq!(r["warmup_s"], 0.0, "no warm-up on the Cpu");
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
    // A file without a tokenizer takes ids only.
    let dir = std::env::temp_dir().join(format!("ferrocm-run-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("no-tokenizer.gguf");
    let with = Gguf::from_bytes(
        SyntheticModel::new(Arch::Llama)
            .to_gguf()
            .unwrap()
            .to_bytes()
            .unwrap(),
    )
    .unwrap();
    let mut without = GgufWriter::new();
    for (k, v) in with.metadata() {
        if !k.starts_with("tokenizer.") {
            without.metadata(k, v.clone());
        }
    }
    for t in with.tensors() {
        without
            .raw(
                &t.name,
                &t.shape,
                t.ggml_type,
                with.tensor_bytes(&t.name).unwrap().to_vec(),
            )
            .unwrap();
    }
    without.write(&path).unwrap();
    let path = path.to_str().unwrap();
    let (code, _, err) = ferrocm(&["run", path, "--prompt", "hello", "--device", "cpu"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no tokenizer") && err.contains("--prompt-ids"),
        "{err}"
    );
    let (code, _, err) = ferrocm(&[
        "run",
        path,
        "--prompt-ids",
        "1,2",
        "--max-tokens",
        "2",
        "--device",
        "cpu",
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = ferrocm(&["chat", path, "--device", "cpu"]);
    assert_eq!(code, 1);
    assert!(err.contains("no tokenizer"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
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

#[test]
fn text_prompts_go_through_the_files_tokenizer() {
    let (code, out, err) = ferrocm(&[
        "tokenize",
        "synthetic:tiny:f32",
        "-p",
        "Once upon a time, the little cat",
        "--ids",
    ]);
    assert_eq!(code, 0, "{err}");
    let ids: Vec<u64> = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(ids[0], 1, "BOS first");
    // The tiny model, greedy, 16 tokens from the text prompt, plus `extra`.
    let tiny = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "synthetic:tiny:q4_0",
            "--device",
            "cpu",
            "-p",
            "Once upon a time, the little cat",
            "--max-tokens",
            "16",
            "--temperature",
            "0",
        ];
        args.extend_from_slice(extra);
        let (code, out, err) = ferrocm(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        (out, err)
    };
    let (out, _) = tiny(&["--json"]);
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["prompt_tokens"].as_u64().unwrap() as usize, ids.len());
    let text = r["text"].as_str().expect("the text of the tokens");
    assert!(r["tokens"].as_array().unwrap().len() <= 16);
    // Streamed text is the summary's text.
    let (streamed, err) = tiny(&[]);
    assert_eq!(streamed.trim_end_matches('\n'), text);
    assert!(
        err.contains("tokens/s"),
        "the summary goes to stderr: {err}"
    );
    // A stop string ends the text before it: the first character after the
    // first that is not whitespace (the greedy text is the same every run).
    let stop = text
        .chars()
        .skip(1)
        .find(|c| !c.is_whitespace())
        .expect("a generated text of more than one visible character")
        .to_string();
    let (out, _) = tiny(&["--stop", &stop, "--json"]);
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let cut = r["text"].as_str().unwrap();
    assert!(
        text.starts_with(cut) && !cut.contains(&stop) && cut.len() < text.len(),
        "{text:?} {cut:?}"
    );
}

#[test]
fn chat_reads_a_message_a_line() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ferrocm"))
        .args([
            "chat",
            "synthetic:tiny:q4_0",
            "--device",
            "cpu",
            "--max-tokens",
            "6",
            "--temperature",
            "0",
            "--system",
            "Be brief.",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"Hello\n\nHow are you?\n/exit\nnever read\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("2 replies"), "{err}");
    // One line per reply (a reply may itself hold newlines, not fewer).
    assert!(String::from_utf8_lossy(&out.stdout).lines().count() >= 2);
}

#[test]
fn synthesize_writes_a_file_run_loads() {
    let dir = std::env::temp_dir().join(format!("ferrocm-synth-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("tiny.gguf");
    let path = path.to_str().unwrap();
    let (code, _, err) = ferrocm(&["synthesize", "tiny:q4_0", path]);
    assert_eq!(code, 0, "{err}");
    let g = Gguf::open(path).unwrap();
    assert_eq!(
        g.get("tokenizer.ggml.model").and_then(|v| v.as_str()),
        Some("llama")
    );
    let from_file = [
        "run",
        path,
        "--device",
        "cpu",
        "-p",
        "Hi",
        "--max-tokens",
        "4",
        "--temperature",
        "0",
        "--json",
    ];
    let in_memory = [
        "run",
        "synthetic:tiny:q4_0",
        "--device",
        "cpu",
        "-p",
        "Hi",
        "--max-tokens",
        "4",
        "--temperature",
        "0",
        "--json",
    ];
    let tokens = |args: &[&str]| {
        let (code, out, err) = ferrocm(args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()["tokens"].clone()
    };
    assert_eq!(tokens(&from_file), tokens(&in_memory));
    let (code, _, err) = ferrocm(&["synthesize", "tiny:q9_9", path]);
    assert_eq!(code, 1);
    assert!(err.contains("q9_9"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
