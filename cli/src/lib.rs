//! ferrocm-cli: what the `ferrocm` command runs, as a library for tools and
//! tests.
//!
//! - [`check`]: every op × dtype on a device against the Cpu backend (the
//!   README's main job; `tests/ops_emulator.rs` runs it over many layouts);
//! - [`bench`]: every kernel family timed on a device as a share of its copy
//!   bandwidth, beside the Cpu backend;
//! - [`gguf`]: a GGUF file's metadata and tensor table.
//!
//! Neither is part of the op API a model uses: the case lists and report
//! formats may change with any release.

pub mod bench;
pub mod check;
pub mod gguf;
pub mod kernels_report;
pub mod run;
