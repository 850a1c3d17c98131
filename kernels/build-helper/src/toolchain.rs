//! The toolchain the device builds need: a nightly (for -Zbuild-std), with
//! rust-src and llvm-bitcode-linker, each missing piece named with its fix.

use crate::fail;
use std::path::PathBuf;
use std::process::Command;

/// The nightly ferrocm is built and tested with (rust-toolchain.toml).
pub const PINNED_NIGHTLY: &str = "nightly-2026-10-15";

/// Fails first, in one line that says so, when the compiler is not a
/// nightly: the device builds need -Zbuild-std, and the error stable gives
/// for it ("-Z is only accepted on nightly") came far down a long log.
pub(crate) fn check_toolchain() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(&rustc)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if !version.contains("nightly") && !version.contains("-dev") {
        fail(&format!(
            "ferrocm needs a nightly Rust toolchain ({PINNED_NIGHTLY}, with rust-src, llvm-tools and llvm-bitcode-linker); this build runs `{version}`\n\
             Its kernels are compiled for amdgcn and nvptx64 with -Zbuild-std, which only a nightly accepts.\n\
             Pin it in your project: a rust-toolchain.toml with channel = \"{PINNED_NIGHTLY}\" and components = [\"rust-src\", \"llvm-tools\", \"llvm-bitcode-linker\"] (ferrocm's README, \"Use ferrocm as a dependency\")."
        ));
    }
    // The components the device builds need, each named with its fix rather
    // than as the error -Zbuild-std or the PTX link gives without it.
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .unwrap_or_default();
    let host = std::env::var("HOST").unwrap_or_default();
    let missing = |path: PathBuf, component: &str, why: &str| {
        if !path.exists() {
            fail(&format!(
                "ferrocm needs the `{component}` component of `{version}` ({why}); it is not installed (no {}).\n\
                 Run `rustup component add {component}`, or list it in your rust-toolchain.toml's components.",
                path.display()
            ));
        }
    };
    missing(
        sysroot.join("lib/rustlib/src/rust/library/core"),
        "rust-src",
        "-Zbuild-std compiles core for the GPU targets",
    );
    if std::env::var("FERROCM_PTX").as_deref() != Ok("off") {
        missing(
            sysroot.join(format!(
                "lib/rustlib/{host}/bin/self-contained/llvm-bitcode-linker"
            )),
            "llvm-bitcode-linker",
            "it links the PTX module; FERROCM_PTX=off builds without one",
        );
    }
    // Another nightly may build, or may not (the device code uses unstable
    // features): say which one is tested.
    let pinned_date = PINNED_NIGHTLY.trim_start_matches("nightly-");
    if version.contains("nightly") && !version_matches_pin(&version, pinned_date) {
        println!(
            "cargo:warning=ferrocm is tested with {PINNED_NIGHTLY}; this build runs `{version}`. If the kernels fail to compile, pin {PINNED_NIGHTLY} (rust-toolchain.toml)."
        );
    }
}

/// Whether `rustc --version` (`rustc 1.x.0-nightly (hash YYYY-MM-DD)`, the
/// date of the commit, the day before the nightly's) is the nightly of
/// `pinned` (`YYYY-MM-DD`).
fn version_matches_pin(version: &str, pinned: &str) -> bool {
    let Some(commit) = version
        .trim_end_matches(')')
        .rsplit(' ')
        .next()
        .and_then(day_number)
    else {
        return false;
    };
    day_number(pinned).is_some_and(|p| p == commit + 1 || p == commit)
}

/// Days since 0000-03-01 of a `YYYY-MM-DD` date (for the one-day compare).
fn day_number(date: &str) -> Option<i64> {
    let mut it = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, m, d) = (it.next()??, it.next()??, it.next()??);
    let (y, m) = if m <= 2 { (y - 1, m + 12) } else { (y, m) };
    Some(365 * y + y / 4 - y / 100 + y / 400 + (153 * (m - 3) + 2) / 5 + d)
}
