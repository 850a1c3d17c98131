// Included by ferrocm-build (which sets `cfg(ferrocm_mma = ..)` per arch
// from it) and by `host` (which tells the op layer whether a device's code
// has a matrix unit): one list for both. Plain std, no crate paths, and no
// doc examples (they would run in both crates; the kernels crate's
// tests/device_layer.rs checks the list).

/// The matrix instruction the device layer's `mma` primitive uses in the
/// code built for `arch` (an AMDGPU arch such as `gfx942` or
/// `gfx11-generic`, or an NVIDIA PTX target such as `sm_80`): `"mfma"` on
/// CDNA2/3 (gfx90a, gfx94x, gfx950), `"wmma11"` on RDNA3/3.5 (gfx11),
/// `"wmma12"` on RDNA4 (gfx12), `"sync"` (`mma.sync`) on sm_80 and later;
/// `None` where the primitive's FMA body runs.
pub fn matrix_unit_of(arch: &str) -> Option<&'static str> {
    if let Some(sm) = arch.strip_prefix("sm_") {
        let digits: String = sm.chars().take_while(|c| c.is_ascii_digit()).collect();
        return (digits.parse::<u32>().unwrap_or(0) >= 80).then_some("sync");
    }
    if ["gfx90a", "gfx942", "gfx950", "gfx9-4-generic"].contains(&arch) {
        Some("mfma")
    } else if arch.starts_with("gfx11") {
        Some("wmma11")
    } else if arch.starts_with("gfx12") {
        Some("wmma12")
    } else {
        None
    }
}

/// Whether the unit named `unit` (as [`matrix_unit_of`] names it) loads
/// fragments from LDS tiles stored with K as their rows as cheaply as from
/// K-contiguous ones: NVIDIA's `ldmatrix .trans` does; on the AMD units
/// such a load gathers halves one by one, so kernels there store every
/// tile K contiguous instead (transposing on the way into LDS).
#[allow(dead_code)] // ferrocm-build includes this file too
pub fn transposed_loads(unit: &str) -> bool {
    unit == "sync"
}
