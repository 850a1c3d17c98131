//! GGML's block-quantized formats, each block defined once for every target:
//! the kernels read these structs in device memory and the Cpu backend reads
//! the same structs in host memory, as every ggml backend shares
//! ggml-common.h. Field order, sizes and bit packing are GGML's (GGUF files
//! hold these bytes as they are); each struct's size is checked at compile
//! time.
//!
//! A block holds `ELEMS` values (32, or 256 for the K-quants, IQ4_XS and
//! Q8_K) in groups of 16 that share one scale: [`QuantBlock::group16`] is the
//! one definition of the values, used by dequantize on every device and, from
//! the Cpu, as the shared scalar path.
//!
//! ```
//! use ferrocm_kernels::elem::F16;
//! use ferrocm_kernels::quant::blocks::{BlockQ4_0, QuantBlock};
//! // d = 0.5; the first byte holds codes 9 (low nibble) and 2 (high nibble).
//! let mut b = BlockQ4_0 { d: F16(0x3800), qs: [0x88; 16] };
//! b.qs[0] = 0x29;
//! assert_eq!(b.group16(0)[0], 0.5);   // (9 - 8) * 0.5, element 0
//! assert_eq!(b.group16(1)[0], -3.0);  // (2 - 8) * 0.5, element 16
//! assert_eq!(b.group16(0)[1], 0.0);   // (8 - 8) * 0.5
//! ```

use crate::elem::{F16, f16_bits_to_f32, f32_to_f16_bits};
use rocm_kernel_macros::amdgpu_device;

/// Elements of a K-quant super-block (and of IQ4_XS and Q8_K).
pub const QK_K: usize = 256;

/// The 16 values a 4-bit code of IQ4_NL and IQ4_XS stands for (GGML's
/// `kvalues_iq4nl`).
pub const IQ4NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// The FP4 (E2M1) values of MXFP4's codes, doubled (GGML's `kvalues_mxfp4`;
/// the block scale is halved to match).
pub const MXFP4_VALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// A 16-entry table of i8 packed into two u64s, read by [`lookup16`]: a
/// lookup by shifts of two constants stays in registers, where an indexed
/// constant array goes to private memory on AMDGPU.
const fn pack16(t: [i8; 16]) -> [u64; 2] {
    let mut w = [0u64; 2];
    let mut i = 0;
    while i < 16 {
        w[i / 8] |= (t[i] as u8 as u64) << (8 * (i % 8));
        i += 1;
    }
    w
}

const IQ4NL_PACKED: [u64; 2] = pack16(IQ4NL_VALUES);
const MXFP4_PACKED: [u64; 2] = pack16(MXFP4_VALUES);

/// Entry `idx & 15` of a table packed by [`pack16`].
#[amdgpu_device]
#[inline(always)]
fn lookup16(p: [u64; 2], idx: u8) -> i8 {
    #[cfg(ferrocm_device)]
    let w = if idx & 8 != 0 { p[1] } else { p[0] };
    // On the host a bit-select: x86 compiled the choice as a branch, taken
    // at random by 4-bit codes (IQ4 dequantize ran at 3.6 GB/s).
    #[cfg(not(ferrocm_device))]
    let w = {
        let high = 0u64.wrapping_sub(((idx >> 3) & 1) as u64);
        (p[1] & high) | (p[0] & !high)
    };
    (w >> (8 * (idx & 7) as u32)) as u8 as i8
}

/// A block of one quantized format, as GGML lays it out.
#[amdgpu_device]
pub trait QuantBlock: Copy + 'static {
    /// Elements per block.
    const ELEMS: usize;
    /// GGML's type id (`GGML_TYPE_*`, as GGUF stores it).
    const GGML_TYPE: u32;
    /// Groups of 16 elements per block.
    const GROUPS: usize = Self::ELEMS / 16;
    /// Elements `[16 g, 16 g + 16)` of the block in f32, as GGML's
    /// `dequantize_row_*` computes them (`g < GROUPS`; larger `g` wrap).
    fn group16(&self, g: usize) -> [f32; 16];
    /// [`QuantBlock::group16`], bit for bit, from the widest loads the
    /// block's place in a 16-byte aligned array allows (the dequantize
    /// kernels: one load a byte made them issue-bound, H200 Q5_K 37 loads a
    /// group; H100, 4096 x 14336 to bf16, % of copy: IQ4_XS 82.9 -> 92.6,
    /// Q8_K 86.1 -> 93.8, Q4_K 87.9 -> 93.2, Q2_K 86.5 -> 91.8; MXFP4's
    /// 17-byte blocks in [`read16`]'s six loads, 85.6 -> 90.9). The
    /// formats that have no such form give `group16`.
    ///
    /// # Safety
    /// As [`QuantBlock::unit8`]: `self` lies in an array of blocks that
    /// starts on a 16-byte boundary.
    #[inline(always)]
    unsafe fn group16_wide(&self, g: usize) -> [f32; 16] {
        self.group16(g)
    }
    /// Units of 32 elements per block ([`QuantBlock::unit8`]).
    const UNITS: usize = Self::ELEMS / 32;
    /// Unit `u` (`< UNITS`) of the block as 8-bit codes, for the integer dot
    /// products of the matrix-vector kernels: two groups of 16 whose codes
    /// share bytes of the block, read in the widest loads the block's place
    /// in a 16-byte aligned array allows. Where `group16` rounds
    /// `d * (q - 8)`, this gives `d * q - 8 d`: the same value up to one
    /// rounding.
    ///
    /// # Safety
    /// `self` lies in an array of blocks that starts on a 16-byte boundary
    /// (a device buffer), as the widest loads assume.
    unsafe fn unit8(&self, u: usize) -> Unit8;
    /// [`QuantBlock::unit8`], field for field, as the matrix-vector
    /// kernels read it with two or more rows of `x` a pass, where a form
    /// with more work in registers and fewer loads pays but the one-row
    /// kernel (decode) is faster with `unit8`'s. Q4_K's and Q5_K's scales
    /// in one 16-byte load (H100, 4096 x 14336: Q5_K 2/4/8 rows of x 24.0
    /// -> 22.5, 40.0 -> 37.4, 62.9 -> 60.3 us; Q4_K 19.2 -> 16.4, 26.3 ->
    /// 24.3, 43.5 -> 43.8), where Q5_K's one-row product took 17.4 -> 18.2
    /// us.
    ///
    /// # Safety
    /// As [`QuantBlock::unit8`].
    #[inline(always)]
    unsafe fn unit8_shared(&self, u: usize) -> Unit8 {
        unsafe { self.unit8(u) }
    }
    /// Weight rows each workitem of the matrix-vector kernels takes with one
    /// row of `x`: 2 where sharing each load of `x` between two rows was
    /// faster on the H100 (4096 x 14336: Q4_0 12.2 -> 10.2 us, IQ4_XS 14.9
    /// -> 14.4, MXFP4 44 -> 51% of copy; the legacy formats and the IQ4s),
    /// 1 where it was slower (Q8_0 27.0 -> 28.0 us, Q3_K 17.1 -> 21.3, Q5_K
    /// 18.4 -> 21.0, Q6_K 23.5 -> 24.7; Q2_K and Q4_K faster hot but slower
    /// with the weights rotated past the L2, 16.1 -> 18.4 for Q4_K).
    const MATVEC_ROWS: u32 = 1;
    /// Weight rows each workitem of the matrix-vector kernels takes with
    /// two rows of `x` a pass: 2 where sharing the loads of `x` pays (H200,
    /// 4096 x 14336: Q4_0 19.7 -> 15.7 us, Q4_K 20.8 -> 18.9, IQ4_NL 22.5 ->
    /// 16.7), 1 where the second unit's decode costs more (Q3_K 24.2 ->
    /// 24.5, Q5_K 22.4 -> 23.5).
    const MATVEC_ROWS_PAIR: u32 = 2;
    /// Weight rows each workitem of the matrix-vector kernels takes with
    /// four rows of `x` a pass: 2 where a second row sharing the loads of
    /// `x` pays, 1 where the second unit's decode and registers cost more
    /// than the loads it saves (Q5_K, H200, 4096 x 14336, 8 rows of x:
    /// 89.3 -> 77.4 us with 1; Q6_K 70.8 -> 88.6 us, so it keeps 2).
    const MATVEC_ROWS_WIDE: u32 = 2;
    /// Weight rows each workitem of the matrix-vector kernels takes with
    /// eight rows of `x` in one pass ([`QuantBlock::MATVEC_ONE_PASS_8`] on
    /// a device whose widest pass holds eight), up to
    /// [`QMATVEC_MAX_ROWS`](crate::quant::matvec::QMATVEC_MAX_ROWS): 4
    /// where two more rows sharing each load of `x` paid, with the kernel
    /// held to one workgroup an SM so the registers hold them (kernels'
    /// build script; H100, 4096 x 14336, 8 rows of x: Q5_1 46.2 -> 44.0 us,
    /// Q3_K 70.7 -> 62.8, Q5_K 71.4 -> 67.2, Q8_K 55.0 -> 50.5, IQ4_XS
    /// 45.7 -> 42.4 in one pass), else [`QuantBlock::MATVEC_ROWS_WIDE`]
    /// (four rows under the same bound cost Q8_0 49.6 -> 52.3, Q4_K 44.8 ->
    /// 52.8, Q6_K 55.8 -> 82.6).
    const MATVEC_ROWS_8: u32 = Self::MATVEC_ROWS_WIDE;
    /// Workitems that share a weight row with 1, 2, 4 and 8 rows of `x` a
    /// pass, at least a wave (the host takes
    /// [`QMATVEC_ROW_LANES`](crate::quant::matvec::QMATVEC_ROW_LANES) where
    /// these would leave half the compute units without a workgroup):
    /// fewer give each row's sums a shorter reduction and each workitem a
    /// longer loop over its units. H100, 4096 x 14336, against 128 for
    /// every pass, us: 4 rows of x at 32 lanes Q4_0 21.4 -> 17.4, Q5_K
    /// 36.9 -> 32.6, 8 rows Q5_K 60.6 -> 42.4, IQ4_XS 39.0 -> 27.9. One row
    /// of x is chosen by a 7B model's decode, whose weights are mostly
    /// 4096 wide (the 14336 x 4096 gate and up, 54% of the bytes): 64
    /// where the decode was faster with it (Q2_K, Q5_K, though Q5_K's 4096
    /// x 14336 alone prefers 128) or both large shapes were (Q5_1,
    /// IQ4_NL), 128 where 64 was level or slower (Q6_K decode 289.7 ->
    /// 290.2 tokens/s, Q8_0 277.9 -> 274.6);
    /// docs/h100-bench.md has every format's.
    const MATVEC_LANES: [u32; 4] = [128, 64, 32, 32];
    /// Whether `qmatvec8_*` takes eight rows of `x` in one pass where the
    /// device holds them ([`QMATVEC_WIDE_PASS`](crate::device::QMATVEC_WIDE_PASS)):
    /// each load of `x` then meets every weight byte of the unit once, not
    /// twice. False keeps two passes of four (H200, 4096 x 14336, 8 rows of
    /// x: one pass took Q6_K 62.2 -> 54.4 us, MXFP4 57.4 -> 49.0, Q4_K 48.0
    /// -> 44.8, Q8_0 51.0 -> 48.5, but Q4_0 41.0 -> 41.7, and 43.7 on an
    /// H100 with four weight rows a workitem; IQ4_XS 45.6 -> 47.3 with two,
    /// 45.7 -> 42.4 with four, [`QuantBlock::MATVEC_ROWS_8`]).
    const MATVEC_ONE_PASS_8: bool = true;
    /// Whether every unit's halves are groups `2 j` and `2 j + 1` of its
    /// block: the matrix-vector kernels then load both groups' `x` scales
    /// in one 16-byte load (their L1 traffic is what bounds them).
    const PAIRED_GROUPS: bool = false;
    /// Whether the matrix-vector kernels read `x`'s codes from their
    /// paired copy ([`x_paired_slot`](crate::quant::matvec::x_paired_slot)),
    /// where a half of eight neighbouring units is one 128-byte line: only
    /// for a format whose unit `u` is groups `2 u` and `2 u + 1` of its
    /// row, and true where it paid (H100, 4096 x 14336: Q4_0 one row of x
    /// 14.8 -> 12.4 us, eight 41.3 -> 38.4; Q5_0 16.3 -> 15.2, 46.3 ->
    /// 43.5). The other paired formats were mixed (Q4_1 12.5 -> 12.1 at one
    /// row but 39.0 -> 44.7 at eight; MXFP4 19.1 -> 20.2 at one, and with
    /// its codes in six loads level at one but 44.9 -> 47.5 at eight) or
    /// slower (Q8_0, Q8_1, Q8_K, IQ4_XS 2-8%) and read `x` in row order.
    const PAIRED_X: bool = false;
    /// Groups of 16 each workitem of the dequantize kernels takes (1 or 2;
    /// both read before either is stored): 2 where the decode is short
    /// and the workitem waits on its loads (H200, 4096 x 14336 to bf16:
    /// Q4_0 60.6 -> 42.7 us, Q5_K 66.2 -> 60.1, IQ4_NL 65.7 -> 47.5; H100,
    /// with [`QuantBlock::group16_wide`]'s five-load [`read16_selected`]: Q8_0
    /// 88.4 -> 95.7% of copy, Q6_K 76.4 -> 91.9%), 1 where it is long enough
    /// to keep the SM issuing.
    const DEQUANT_GROUPS: u32 = 1;
    /// The bias [`QuantBlock::unit8`]'s codes carry: `group16` gives
    /// `(code - UNIT_BIAS) * scale` (+ `offset` with
    /// [`QuantBlock::UNIT_HAS_MIN`]), one rounding as GGML's definition,
    /// where the unit's `offset` holds `-UNIT_BIAS * scale` for the dot
    /// products. 8 for Q4_0, 16 for Q5_0, 4 for Q3_K, 32 for Q6_K.
    const UNIT_BIAS: i32 = 0;
    /// Whether a unit's `offset` is a minimum of its own (Q4_1, Q5_1, Q2_K,
    /// Q4_K, Q5_K): `group16` gives `code * scale + offset`.
    const UNIT_HAS_MIN: bool = false;
}

/// Whether `B`'s units carry an `offset` (a minimum, or a code bias): false
/// for Q8_0, Q8_1, Q8_K, IQ4_NL, IQ4_XS and MXFP4, whose dot products then
/// skip `offset * sx` (a product of 0 that cost an instruction, and turned
/// `x`'s code sum overflowing to ±inf, possible for finite groups beyond
/// `f32::MAX / 16`, into NaN). H100, 4096 x 14336, 8 rows of x: Q8_0 47.6
/// -> 44.3 us, IQ4_XS 29.2 -> 27.0, Q8_K 38.0 -> 37.0; ptxas's registers
/// and order moved elsewhere too: IQ4_XS at 2 rows 17.3 -> 19.4, IQ4_NL at
/// 4 rows 21.6 -> 23.8, Q8_K at 1 row 27.4 -> 30.3 (14336 x 4096: 27.9 ->
/// 25.9).
#[amdgpu_device]
#[inline(always)]
pub const fn unit_has_offset<B: QuantBlock>() -> bool {
    B::UNIT_HAS_MIN || B::UNIT_BIAS != 0
}

/// 32 elements of a block as signed 8-bit codes: the 16 codes of half `h`
/// (the bytes of `codes[4 h..4 h + 4]`, little-endian) are the block's
/// elements `[16 group[h], 16 group[h] + 16)`, each worth
/// `scale[h] * code + offset[h]`.
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Unit8 {
    /// Codes, four per word.
    pub codes: [u32; 8],
    /// Scale of each half.
    pub scale: [f32; 2],
    /// Offset of each half (a minimum, or minus the code's bias).
    pub offset: [f32; 2],
    /// Group (of 16 elements in the block) of each half.
    pub group: [u32; 2],
}

/// Half `h` of unit `x` of a `B` block as f32: the 16 values of its group
/// exactly as [`QuantBlock::group16`] gives them (the same products, each
/// rounded once; zeros keep their sign, an infinite scale gives what the
/// definition gives), from the unit's wide loads.
#[amdgpu_device]
#[inline(always)]
pub fn unit_half<B: QuantBlock>(x: &Unit8, h: usize) -> [f32; 16] {
    let mut out = [0.0f32; 16];
    crate::unroll4!(i < 4 => {
        let w = x.codes[4 * h + i];
        crate::unroll4!(b < 4 => {
            let code = (w >> (8 * b)) as u8 as i8 as i32;
            let v = (code - B::UNIT_BIAS) as f32 * x.scale[h];
            out[4 * i + b] = if B::UNIT_HAS_MIN { v + x.offset[h] } else { v };
        });
    });
    out
}

/// The alignment of byte `offset` of every block of `size` bytes in an
/// array that starts on a 16-byte boundary (at most 16).
#[amdgpu_device]
#[inline(always)]
pub const fn align_in_array(size: usize, offset: usize) -> usize {
    let bits = size | offset | 16;
    bits.isolate_lowest_one()
}

/// The four words at the 4-byte aligned `q`.
///
/// # Safety
/// The 16 bytes at `q` are readable and `q` is 4-byte aligned.
#[amdgpu_device]
#[inline(always)]
unsafe fn words4(q: *const u32) -> [u32; 4] {
    unsafe { [q.read(), q.add(1).read(), q.add(2).read(), q.add(3).read()] }
}

/// The 16 bytes from byte `s` (0..4) of the words `w`, `tail` the word
/// after them (its bytes past `s` unused): each word joined with the next
/// by a funnel shift (`shf.r.wrap`, `v_alignbit_b32`).
#[amdgpu_device]
#[inline(always)]
fn funnel16(w: [u32; 4], tail: u32, s: usize) -> [u32; 4] {
    let sh = 8 * s as u32;
    let join = |lo: u32, hi: u32| ((((hi as u64) << 32) | lo as u64) >> sh) as u32;
    [
        join(w[0], w[1]),
        join(w[1], w[2]),
        join(w[2], w[3]),
        join(w[3], tail),
    ]
}

/// The 16 bytes at `p` as four little-endian words, in loads as wide as
/// `p`'s alignment `ALIGN` (16, 8, 4, 2 or 1) allows: one of 16 bytes, two
/// of 8, four of 4, five (four of 4, one of 2) or six (four of 4, one of 2,
/// one of 1).
///
/// # Safety
/// `p..p + 16` is readable and `p` is `ALIGN`-aligned; with `ALIGN` 2 or 1, so
/// is the 4-byte aligned word holding `p` (`p` lies in an array that starts
/// on a 4-byte boundary).
#[amdgpu_device]
#[inline(always)]
pub unsafe fn read16<const ALIGN: usize>(p: *const u8) -> [u32; 4] {
    #[cfg(not(ferrocm_device))]
    debug_assert!(
        (p as usize).is_multiple_of(ALIGN),
        "read16::<{ALIGN}> at {p:?}"
    );
    unsafe {
        if ALIGN >= 16 {
            (p as *const crate::elem::W128).read().0
        } else if ALIGN >= 8 {
            let q = p as *const u64;
            let (a, b) = (q.read(), q.add(1).read());
            [a as u32, (a >> 32) as u32, b as u32, (b >> 32) as u32]
        } else if ALIGN >= 4 {
            words4(p as *const u32)
        } else if ALIGN >= 2 {
            // Five loads rather than eight 2-byte ones (a matrix-vector
            // kernel's weight loads are most of its load instructions):
            // the four words from the 4-byte boundary at or before `p` (in
            // the array, which starts on one) and bytes 14, 15 of `p` (the
            // two past those words when `p` is not on a boundary), joined
            // by funnel shifts: no branch and no select (neighbouring blocks
            // of 18 or 110 bytes alternate). H100, 4096 x 14336, against
            // `read16_selected`: Q3_K 8 rows of x 58.9 -> 54.7 us, IQ4_NL
            // 42.1 -> 40.6 (one row 16.0 -> 15.5, from eight 2-byte loads),
            // Q6_K one row 24.0 -> 23.5.
            let s = (p as usize) & 2;
            let q = p.wrapping_sub(s) as *const u32;
            let w = words4(q);
            let tail = (p.add(14) as *const u16).read() as u32;
            funnel16(w, tail, s)
        } else {
            // Six loads rather than sixteen of a byte (MXFP4's 17-byte
            // blocks): the four words from the 4-byte boundary at or before
            // `p` (in the array, which starts on one), and the `s = p % 4`
            // bytes past them in a 2-byte and a 1-byte load that never
            // reach past `p + 16`, joined by funnel shifts.
            let s = (p as usize) & 3;
            let base = p.wrapping_sub(s);
            let q = base as *const u32;
            let w = words4(q);
            // Bytes 16, 17 of `base` when s >= 2 (else bytes 14, 15, unused).
            let h = (base.wrapping_add(if s >= 2 { 16 } else { 14 }) as *const u16).read() as u32;
            let last = p.add(15).read() as u32;
            let tail = match s {
                3 => h | last << 16,
                2 => h,
                _ => last,
            };
            funnel16(w, tail, s)
        }
    }
}

/// The 16 bytes at a 2-byte aligned `p` as four little-endian words, in
/// five loads: three words from the first 4-byte boundary at or after `p`
/// and two 2-byte ends, at addresses chosen without a branch, the words
/// picked by a select. Q5_0 and Q8_0 read their codes so: with
/// [`read16`]'s funnel shifts (the other 2-byte aligned formats' form)
/// their products ran slower on the H100 (4096 x 14336: Q5_0 8 rows of x
/// 42.2 -> 49.4 us, Q8_0 2 rows 28.2 -> 29.6, Q8_0 dequantize to bf16
/// 62.9 -> 63.6).
///
/// # Safety
/// `p..p + 16` is readable and `p` is 2-byte aligned.
#[amdgpu_device]
#[inline(always)]
pub unsafe fn read16_selected(p: *const u8) -> [u32; 4] {
    #[cfg(not(ferrocm_device))]
    debug_assert!((p as usize).is_multiple_of(2), "read16_selected at {p:?}");
    unsafe {
        let odd = (p as usize) & 2;
        let q = p.wrapping_add(odd) as *const u32;
        let (w0, w1, w2) = (q.read(), q.add(1).read(), q.add(2).read());
        // Bytes 12..14 when p is 4-byte aligned, else bytes 0..2.
        let h0 = (p.wrapping_add(12 - 6 * odd) as *const u16).read() as u32;
        let h1 = (p.wrapping_add(14) as *const u16).read() as u32;
        let aligned = [w0, w1, w2, h0 | h1 << 16];
        let shifted = [
            h0 | w0 << 16,
            w0 >> 16 | w1 << 16,
            w1 >> 16 | w2 << 16,
            w2 >> 16 | h1 << 16,
        ];
        if odd == 0 { aligned } else { shifted }
    }
}

/// Byte `offset` of the block `b`, as a pointer.
#[amdgpu_device]
#[inline(always)]
fn byte_at<B>(b: &B, offset: usize) -> *const u8 {
    (b as *const B as *const u8).wrapping_add(offset)
}

/// Bits 0..4 of `n` spread to bit 0 of bytes 0..4.
#[amdgpu_device]
#[inline(always)]
fn spread4(n: u32) -> u32 {
    ((n & 0xF).wrapping_mul(0x0020_4081)) & 0x0101_0101
}

/// The low and high nibbles of four words: the two halves of a unit packed
/// as Q4_0 packs a block.
#[amdgpu_device]
#[inline(always)]
fn nibbles(w: [u32; 4]) -> [u32; 8] {
    let lo = |i: usize| w[i] & 0x0F0F_0F0F;
    let hi = |i: usize| (w[i] >> 4) & 0x0F0F_0F0F;
    [lo(0), lo(1), lo(2), lo(3), hi(0), hi(1), hi(2), hi(3)]
}

/// The 32 4-bit codes of four words (packed as Q4_0 packs a block: the
/// low nibbles are the first half) replaced by their entries of a 16-entry
/// table ([`nibble_table16`](crate::device::nibble_table16)): the unit's
/// two halves as 8-bit values.
#[amdgpu_device]
#[inline(always)]
fn table_nibbles(table: [u32; 4], w: [u32; 4]) -> [u32; 8] {
    let mut out = [0u32; 8];
    crate::unroll4!(i < 4 => {
        (out[i], out[i + 4]) = crate::device::nibble_table16(table, w[i]);
    });
    out
}

/// A group of 16 values of a table format from the four words `w`
/// holding its 4-bit codes at bit `shift` (0 or 4) of each byte: each code's
/// entry of the 16-entry i8 `table` (four at a time,
/// [`byte_table16`](crate::device::byte_table16)) times `scale`.
#[amdgpu_device]
#[inline(always)]
fn table_group16(table: [u32; 4], w: [u32; 4], shift: usize, scale: f32) -> [f32; 16] {
    let mut out = [0.0f32; 16];
    crate::unroll4!(i < 4 => {
        let values = crate::device::byte_table16(table, (w[i] >> shift) & 0x0F0F_0F0F);
        crate::unroll4!(b < 4 => {
            out[4 * i + b] = scale * (values >> (8 * b)) as u8 as i8 as f32;
        });
    });
    out
}

/// A 16-entry i8 table as four little-endian words (the form
/// [`byte_table16`](crate::device::byte_table16) takes).
const fn words16(t: [i8; 16]) -> [u32; 4] {
    let mut w = [0u32; 4];
    let mut i = 0;
    while i < 16 {
        w[i / 4] |= (t[i] as u8 as u32) << (8 * (i % 4));
        i += 1;
    }
    w
}

const IQ4NL_WORDS: [u32; 4] = words16(IQ4NL_VALUES);
const MXFP4_WORDS: [u32; 4] = words16(MXFP4_VALUES);

/// A unit whose two halves share a scale and offset.
#[amdgpu_device]
#[inline(always)]
fn unit(codes: [u32; 8], scale: f32, offset: f32, g0: u32, g1: u32) -> Unit8 {
    Unit8 {
        codes,
        scale: [scale; 2],
        offset: [offset; 2],
        group: [g0, g1],
    }
}

/// Q4_0: 32 elements, `d * (q - 8)` with 4-bit `q` (element `j` in the low
/// nibble of `qs[j]`, element `j + 16` in its high nibble).
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ4_0 {
    /// Scale (f16 bits).
    pub d: F16,
    /// Codes, two per byte.
    pub qs: [u8; 16],
}

/// Q4_1: 32 elements, `d * q + m` with 4-bit `q` (packed as Q4_0).
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ4_1 {
    /// Scale (f16 bits).
    pub d: F16,
    /// Minimum (f16 bits).
    pub m: F16,
    /// Codes, two per byte.
    pub qs: [u8; 16],
}

/// Q5_0: 32 elements, `d * (q - 16)` with 5-bit `q`: 4 bits packed as Q4_0
/// and the fifth of element `j` in bit `j` of `qh` (little-endian).
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ5_0 {
    /// Scale (f16 bits).
    pub d: F16,
    /// Fifth bits, one per element.
    pub qh: [u8; 4],
    /// Low four bits, two per byte.
    pub qs: [u8; 16],
}

/// Q5_1: 32 elements, `d * q + m` with 5-bit `q` (packed as Q5_0).
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ5_1 {
    /// Scale (f16 bits).
    pub d: F16,
    /// Minimum (f16 bits).
    pub m: F16,
    /// Fifth bits, one per element.
    pub qh: [u8; 4],
    /// Low four bits, two per byte.
    pub qs: [u8; 16],
}

/// Q8_0: 32 elements, `d * q` with 8-bit signed `q`.
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ8_0 {
    /// Scale (f16 bits).
    pub d: F16,
    /// Codes.
    pub qs: [i8; 32],
}

/// Q8_1: Q8_0 plus `s = d * sum(q)` (what a Q4_1/Q5_1 dot product needs for
/// the minimum); the activation format of those dot products.
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ8_1 {
    /// Scale (f16 bits).
    pub d: F16,
    /// `d * sum(qs)` (f16 bits).
    pub s: F16,
    /// Codes.
    pub qs: [i8; 32],
}

/// Q2_K: 256 elements in 16 groups of 16, `d * sc * q - dmin * m` with 2-bit
/// `q` and 4-bit group scale `sc` (low nibble of `scales[g]`) and minimum `m`
/// (high nibble).
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ2K {
    /// Group scales (low nibble) and minimums (high nibble).
    pub scales: [u8; 16],
    /// Codes, four per byte.
    pub qs: [u8; 64],
    /// Scale of the group scales (f16 bits).
    pub d: F16,
    /// Scale of the group minimums (f16 bits).
    pub dmin: F16,
}

/// Q3_K: 256 elements in 16 groups of 16, `d * (sc - 32) * q` with 3-bit
/// signed `q` (two bits in `qs`, the third in `hmask`: set means +0, clear
/// means -4) and 6-bit group scales packed into 12 bytes.
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ3K {
    /// Third bits.
    pub hmask: [u8; 32],
    /// Low two bits, four per byte.
    pub qs: [u8; 64],
    /// Sixteen 6-bit group scales.
    pub scales: [u8; 12],
    /// Scale of the group scales (f16 bits).
    pub d: F16,
}

/// Q4_K: 256 elements in 8 sub-blocks of 32, `d * sc * q - dmin * m` with
/// 4-bit `q` and 6-bit sub-block scale `sc` and minimum `m` packed into 12
/// bytes.
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ4K {
    /// Scale of the sub-block scales (f16 bits).
    pub d: F16,
    /// Scale of the sub-block minimums (f16 bits).
    pub dmin: F16,
    /// Eight 6-bit scales and eight 6-bit minimums.
    pub scales: [u8; 12],
    /// Codes, two per byte.
    pub qs: [u8; 128],
}

/// Q5_K: Q4_K with a fifth bit per element in `qh`.
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ5K {
    /// Scale of the sub-block scales (f16 bits).
    pub d: F16,
    /// Scale of the sub-block minimums (f16 bits).
    pub dmin: F16,
    /// Eight 6-bit scales and eight 6-bit minimums.
    pub scales: [u8; 12],
    /// Fifth bits.
    pub qh: [u8; 32],
    /// Low four bits, two per byte.
    pub qs: [u8; 128],
}

/// Q6_K: 256 elements in 16 groups of 16, `d * sc * (q - 32)` with 6-bit
/// `q` (low four bits in `ql`, high two in `qh`) and 8-bit signed `sc`.
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ6K {
    /// Low four bits, two per byte.
    pub ql: [u8; 128],
    /// High two bits, four per byte.
    pub qh: [u8; 64],
    /// Group scales.
    pub scales: [i8; 16],
    /// Scale of the group scales (f16 bits).
    pub d: F16,
}

/// Q8_K: 256 elements, `d * q` with an f32 scale and the sums of each group
/// of 16 codes: the activation format of the K-quants' dot products.
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct BlockQ8K {
    /// Scale.
    pub d: f32,
    /// Codes.
    pub qs: [i8; 256],
    /// Sum of each group of 16 codes.
    pub bsums: [i16; 16],
}

/// IQ4_NL: 32 elements, `d * IQ4NL_VALUES[q]` with 4-bit `q` packed as Q4_0.
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockIq4Nl {
    /// Scale (f16 bits).
    pub d: F16,
    /// Codes, two per byte.
    pub qs: [u8; 16],
}

/// IQ4_XS: 256 elements in 8 sub-blocks of 32, `d * (ls - 32) *
/// IQ4NL_VALUES[q]` with a 6-bit sub-block scale `ls` (low four bits in
/// `scales_l`, high two in `scales_h`).
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockIq4Xs {
    /// Scale (f16 bits).
    pub d: F16,
    /// High two bits of each sub-block scale.
    pub scales_h: u16,
    /// Low four bits of each sub-block scale, two per byte.
    pub scales_l: [u8; 4],
    /// Codes: sub-block `ib` in `qs[16 ib..16 ib + 16]` as Q4_0 packs a block.
    pub qs: [u8; 128],
}

/// MXFP4 (OCP microscaling): 32 FP4 (E2M1) elements and a shared power-of-two
/// scale `2^(e - 127)` (E8M0).
#[amdgpu_device]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct BlockMxfp4 {
    /// Scale exponent (E8M0).
    pub e: u8,
    /// Codes, two per byte, packed as Q4_0.
    pub qs: [u8; 16],
}

const _: () = {
    assert!(size_of::<BlockQ4_0>() == 18);
    assert!(size_of::<BlockQ4_1>() == 20);
    assert!(size_of::<BlockQ5_0>() == 22);
    assert!(size_of::<BlockQ5_1>() == 24);
    assert!(size_of::<BlockQ8_0>() == 34);
    assert!(size_of::<BlockQ8_1>() == 36);
    assert!(size_of::<BlockQ2K>() == 84);
    assert!(size_of::<BlockQ3K>() == 110);
    assert!(size_of::<BlockQ4K>() == 144);
    assert!(size_of::<BlockQ5K>() == 176);
    assert!(size_of::<BlockQ6K>() == 210);
    assert!(size_of::<BlockQ8K>() == 292);
    assert!(size_of::<BlockIq4Nl>() == 18);
    assert!(size_of::<BlockIq4Xs>() == 136);
    assert!(size_of::<BlockMxfp4>() == 17);
};

/// `2^(e - 128)`: an E8M0 scale halved (MXFP4's doubled code values undo
/// the half), exact for every `e` (subnormal for `e` < 2).
#[amdgpu_device]
#[inline(always)]
pub fn e8m0_half_to_f32(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        ((e as u32) - 1) << 23
    };
    f32::from_bits(bits)
}

/// Scale and minimum `j` (0..8) of the 12 packed bytes of Q4_K and Q5_K:
/// six bits each; the first four whole in bytes 0..8, the last four split
/// between a nibble of bytes 8..12 and the top two bits of bytes 0..8.
#[amdgpu_device]
#[inline(always)]
pub fn k4_scale_min(j: usize, q: &[u8; 12]) -> (u8, u8) {
    let j = j & 7;
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// Unit `u`'s scales and offsets (`-dmin * min`) for Q4_K and Q5_K, whose
/// blocks both start with `d`, `dmin` and the 12 scale bytes: those 16
/// bytes in one load, sub-blocks `2 c` and `2 c + 1` (`c = u / 2`,
/// [`k4_scale_min`]) picked from them in registers.
///
/// # Safety
/// `p` is the block's first byte, 16-byte aligned (the blocks are 144 and
/// 176 bytes in an array that starts on a 16-byte boundary).
#[amdgpu_device]
#[inline(always)]
unsafe fn k4_unit_scales(p: *const u8, u: usize) -> ([f32; 2], [f32; 2]) {
    let head = unsafe { read16::<16>(p) };
    let c = (u & 7) >> 1;
    let sh = 16 * (c & 1) as u32;
    let (a, b, e) = (head[1] >> sh, head[2] >> sh, head[3] >> sh);
    // Sub-blocks 0..4: 6-bit fields of bytes 0..8; 4..8: a nibble of bytes
    // 8..12 and the top two bits of bytes 0..8.
    let (scales, mins) = if c < 2 {
        (a & 0x3F3F, b & 0x3F3F)
    } else {
        (
            (e & 0x0F0F) | ((a >> 2) & 0x3030),
            ((e >> 4) & 0x0F0F) | ((b >> 2) & 0x3030),
        )
    };
    let (d, dmin) = (
        f16_bits_to_f32(head[0] as u16),
        f16_bits_to_f32((head[0] >> 16) as u16),
    );
    (
        [d * (scales & 0xFF) as f32, d * (scales >> 8) as f32],
        [-(dmin * (mins & 0xFF) as f32), -(dmin * (mins >> 8) as f32)],
    )
}

/// [`QuantBlock::unit8_shared`] for Q4_K and Q5_K: `unit8`'s codes with
/// the scales from [`k4_unit_scales`]; `unit8`'s byte loads of the scales,
/// unused, go.
///
/// # Safety
/// As [`QuantBlock::unit8`].
#[amdgpu_device]
#[inline(always)]
unsafe fn k4_unit8_shared<B: QuantBlock>(b: &B, u: usize) -> Unit8 {
    let (scale, offset) = unsafe { k4_unit_scales(byte_at(b, 0), u) };
    Unit8 {
        scale,
        offset,
        ..unsafe { b.unit8(u) }
    }
}

/// Group scale `g` (0..16) of Q3_K's 12 packed bytes, 6 bits minus 32: the
/// low four bits are nibbles of bytes 0..8 (low nibbles for groups 0..8),
/// the high two are the 2-bit fields of bytes 8..12.
#[amdgpu_device]
#[inline(always)]
pub fn q3k_scale(g: usize, q: &[u8; 12]) -> i32 {
    let g = g & 15;
    let low = (q[g & 7] >> (4 * (g >> 3))) & 0xF;
    let high = (q[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
    (low | (high << 4)) as i32 - 32
}

#[amdgpu_device]
impl QuantBlock for BlockQ4_0 {
    // Two weight rows a workitem at one row of x: H100, 4096 x 14336 12.2
    // -> 10.2 us (rotated past the L2 17.2 -> 16.0), 14336 x 4096 13.2 ->
    // 11.6; a 7B decode 407.3 -> 412.8 tokens/s.
    const MATVEC_ROWS: u32 = 2;
    const MATVEC_LANES: [u32; 4] = [64, 64, 32, 32];
    const UNIT_BIAS: i32 = 8;
    const MATVEC_ONE_PASS_8: bool = false;
    const PAIRED_GROUPS: bool = true;
    const PAIRED_X: bool = true;
    const DEQUANT_GROUPS: u32 = 2;
    const ELEMS: usize = 32;
    const GGML_TYPE: u32 = 2;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            let w = read16::<{ align_in_array(18, 2) }>(byte_at(self, 2));
            let d = f16_bits_to_f32(self.d.0);
            unit(nibbles(w), d, -8.0 * d, 0, 1)
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        let d = f16_bits_to_f32(self.d.0);
        let shift = 4 * (g & 1);
        let mut out = [0.0f32; 16];
        for (l, o) in out.iter_mut().enumerate() {
            *o = (((self.qs[l] >> shift) & 0xF) as i32 - 8) as f32 * d;
        }
        out
    }
}

#[amdgpu_device]
impl QuantBlock for BlockQ4_1 {
    // Two weight rows a workitem at one row of x: H100, 4096 x 14336 11.6
    // -> 10.0 us, 14336 x 4096 13.0 -> 11.3; a 7B decode level (400.0,
    // 399.6 tokens/s).
    const MATVEC_ROWS: u32 = 2;
    const MATVEC_LANES: [u32; 4] = [64, 64, 32, 32];
    const UNIT_HAS_MIN: bool = true;
    const PAIRED_GROUPS: bool = true;
    const DEQUANT_GROUPS: u32 = 2;
    const ELEMS: usize = 32;
    const GGML_TYPE: u32 = 3;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            let w = read16::<{ align_in_array(20, 4) }>(byte_at(self, 4));
            unit(
                nibbles(w),
                f16_bits_to_f32(self.d.0),
                f16_bits_to_f32(self.m.0),
                0,
                1,
            )
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        let (d, m) = (f16_bits_to_f32(self.d.0), f16_bits_to_f32(self.m.0));
        let shift = 4 * (g & 1);
        let mut out = [0.0f32; 16];
        for (l, o) in out.iter_mut().enumerate() {
            *o = ((self.qs[l] >> shift) & 0xF) as f32 * d + m;
        }
        out
    }
}

/// The 5-bit codes of group `g` of a Q5_0/Q5_1 block.
#[amdgpu_device]
#[inline(always)]
fn q5_codes(qs: &[u8; 16], qh: [u8; 4], g: usize) -> [u32; 16] {
    let high = u32::from_le_bytes(qh) >> (16 * (g & 1));
    let shift = 4 * (g & 1);
    let mut out = [0u32; 16];
    for (l, o) in out.iter_mut().enumerate() {
        *o = ((qs[l] >> shift) & 0xF) as u32 | (((high >> l) & 1) << 4);
    }
    out
}

/// The 5-bit codes of a Q5_0/Q5_1 block as a unit: element `j`'s fifth bit
/// is bit `j` of `qh`.
#[amdgpu_device]
#[inline(always)]
fn q5_units(w: [u32; 4], qh: u32) -> [u32; 8] {
    let mut c = nibbles(w);
    crate::unroll4!(i < 4 => {
        c[i] |= spread4(qh >> (4 * i)) << 4;
        c[4 + i] |= spread4(qh >> (16 + 4 * i)) << 4;
    });
    c
}

#[amdgpu_device]
impl QuantBlock for BlockQ5_0 {
    // Two weight rows a workitem at one row of x: H100, 4096 x 14336 level
    // hot (14.7) and 20.3 -> 19.5 us rotated past the L2, 14336 x 4096
    // 16.4 -> 15.8; a 7B decode level (357.0, 356.2 tokens/s).
    const MATVEC_ROWS: u32 = 2;
    const MATVEC_LANES: [u32; 4] = [64, 64, 32, 64];
    const UNIT_BIAS: i32 = 16;
    const PAIRED_GROUPS: bool = true;
    const PAIRED_X: bool = true;
    const DEQUANT_GROUPS: u32 = 2;
    const ELEMS: usize = 32;
    const GGML_TYPE: u32 = 6;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            let w = read16_selected(byte_at(self, 6));
            let d = f16_bits_to_f32(self.d.0);
            unit(q5_units(w, u32::from_le_bytes(self.qh)), d, -16.0 * d, 0, 1)
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        let d = f16_bits_to_f32(self.d.0);
        let q = q5_codes(&self.qs, self.qh, g);
        let mut out = [0.0f32; 16];
        for (o, &q) in out.iter_mut().zip(q.iter()) {
            *o = (q as i32 - 16) as f32 * d;
        }
        out
    }
}

#[amdgpu_device]
impl QuantBlock for BlockQ5_1 {
    // Two weight rows a workitem at one row of x: H100, 4096 x 14336 19.6
    // -> 17.6 us (rotated 20.7 -> 19.1), 14336 x 4096 18.4 -> 18.0.
    const MATVEC_ROWS: u32 = 2;
    // 64 at one row of x: H100, 14336 x 4096 19.9 -> 18.8 us, 4096 x 14336
    // 20.3 -> 20.0.
    const MATVEC_LANES: [u32; 4] = [64, 128, 32, 32];
    const MATVEC_ROWS_8: u32 = 4;
    const UNIT_HAS_MIN: bool = true;
    const PAIRED_GROUPS: bool = true;
    const DEQUANT_GROUPS: u32 = 2;
    const ELEMS: usize = 32;
    const GGML_TYPE: u32 = 7;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            let w = read16::<{ align_in_array(24, 8) }>(byte_at(self, 8));
            let qh = u32::from_le_bytes(self.qh);
            unit(
                q5_units(w, qh),
                f16_bits_to_f32(self.d.0),
                f16_bits_to_f32(self.m.0),
                0,
                1,
            )
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        let (d, m) = (f16_bits_to_f32(self.d.0), f16_bits_to_f32(self.m.0));
        let q = q5_codes(&self.qs, self.qh, g);
        let mut out = [0.0f32; 16];
        for (o, &q) in out.iter_mut().zip(q.iter()) {
            *o = q as f32 * d + m;
        }
        out
    }
}

/// The 16 signed bytes of four little-endian words, each times `d` (one
/// rounding, as `q as f32 * d`).
#[amdgpu_device]
#[inline(always)]
fn signed_bytes_times(w: [u32; 4], d: f32) -> [f32; 16] {
    let mut out = [0.0f32; 16];
    crate::unroll4!(i < 4 => {
        crate::unroll4!(b < 4 => {
            out[4 * i + b] = (w[i] >> (8 * b)) as u8 as i8 as f32 * d;
        });
    });
    out
}

/// Group `g` of 32 signed 8-bit codes times `d`.
#[amdgpu_device]
#[inline(always)]
fn q8_group(qs: &[i8; 32], d: f32, g: usize) -> [f32; 16] {
    let base = 16 * (g & 1);
    let mut out = [0.0f32; 16];
    for (l, o) in out.iter_mut().enumerate() {
        *o = qs[base + l] as f32 * d;
    }
    out
}

#[amdgpu_device]
impl QuantBlock for BlockQ8_0 {
    const MATVEC_LANES: [u32; 4] = [128, 64, 32, 64];
    const PAIRED_GROUPS: bool = true;
    const DEQUANT_GROUPS: u32 = 2;
    const ELEMS: usize = 32;
    const GGML_TYPE: u32 = 8;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            let a = read16_selected(byte_at(self, 2));
            let b = read16_selected(byte_at(self, 18));
            let c = [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]];
            unit(c, f16_bits_to_f32(self.d.0), 0.0, 0, 1)
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        q8_group(&self.qs, f16_bits_to_f32(self.d.0), g)
    }
    #[inline(always)]
    unsafe fn group16_wide(&self, g: usize) -> [f32; 16] {
        let off = 2 + 16 * (g & 1);
        let w = unsafe { read16_selected(byte_at(self, off)) };
        signed_bytes_times(w, f16_bits_to_f32(self.d.0))
    }
}

#[amdgpu_device]
impl QuantBlock for BlockQ8_1 {
    const MATVEC_LANES: [u32; 4] = [128, 64, 32, 128];
    const PAIRED_GROUPS: bool = true;
    const ELEMS: usize = 32;
    const GGML_TYPE: u32 = 9;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            let a = read16::<{ align_in_array(36, 4) }>(byte_at(self, 4));
            let b = read16::<{ align_in_array(36, 20) }>(byte_at(self, 20));
            let c = [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]];
            unit(c, f16_bits_to_f32(self.d.0), 0.0, 0, 1)
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        q8_group(&self.qs, f16_bits_to_f32(self.d.0), g)
    }
    #[inline(always)]
    unsafe fn group16_wide(&self, g: usize) -> [f32; 16] {
        let off = 4 + 16 * (g & 1);
        let w = unsafe { read16::<{ align_in_array(36, 4) }>(byte_at(self, off)) };
        signed_bytes_times(w, f16_bits_to_f32(self.d.0))
    }
}

#[amdgpu_device]
impl QuantBlock for BlockQ2K {
    // 64 at one row of x: a 7B decode 342.2 -> 408.4 tokens/s on an H100
    // (the 14336 x 4096 gate/up weights 19.9 -> 14.4 us; 4096 x 14336 14.1
    // -> 15.7).
    const MATVEC_LANES: [u32; 4] = [64, 64, 32, 32];
    const UNIT_HAS_MIN: bool = true;
    const ELEMS: usize = QK_K;
    const GGML_TYPE: u32 = 10;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            // Unit u: half h, 16 bytes `sub` of it, bit pairs 2 jp and 2 jp + 1
            // (groups 8 h + 2 j + sub, as group16 numbers them).
            let u = u & 7;
            let (h, sub, jp) = (u >> 2, (u >> 1) & 1, u & 1);
            let w = read16::<{ align_in_array(84, 16) }>(byte_at(self, 16 + 32 * h + 16 * sub));
            let (d, dmin) = (f16_bits_to_f32(self.d.0), f16_bits_to_f32(self.dmin.0));
            let mut out = Unit8 {
                codes: [0; 8],
                scale: [0.0; 2],
                offset: [0.0; 2],
                group: [0; 2],
            };
            crate::unroll4!(half < 2 => {
                let j = 2 * jp + half;
                let g = 8 * h + 2 * j + sub;
                let sc = self.scales[g];
                crate::unroll4!(i < 4 => {
                    out.codes[4 * half + i] = (w[i] >> (2 * j)) & 0x0303_0303;
                });
                out.scale[half] = d * (sc & 0xF) as f32;
                out.offset[half] = -(dmin * (sc >> 4) as f32);
                out.group[half] = g as u32;
            });
            out
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        // Group g: half h (128 elements, 32 bytes of qs), bit pair j of the
        // bytes, first or second 16 of those bytes.
        let g = g & 15;
        let (h, j, sub) = (g >> 3, (g >> 1) & 3, g & 1);
        let sc = self.scales[g];
        let dl = f16_bits_to_f32(self.d.0) * (sc & 0xF) as f32;
        let ml = f16_bits_to_f32(self.dmin.0) * (sc >> 4) as f32;
        let base = 32 * h + 16 * sub;
        let mut out = [0.0f32; 16];
        for (l, o) in out.iter_mut().enumerate() {
            *o = dl * ((self.qs[base + l] >> (2 * j)) & 3) as f32 - ml;
        }
        out
    }
    #[inline(always)]
    unsafe fn group16_wide(&self, g: usize) -> [f32; 16] {
        let g = g & 15;
        let (h, j, sub) = (g >> 3, (g >> 1) & 3, g & 1);
        let (w, dd) = unsafe {
            (
                read16::<{ align_in_array(84, 16) }>(byte_at(self, 16 + 32 * h + 16 * sub)),
                // d and dmin in one load.
                (byte_at(self, 80) as *const u32).read(),
            )
        };
        let sc = self.scales[g];
        let dl = f16_bits_to_f32(dd as u16) * (sc & 0xF) as f32;
        let ml = f16_bits_to_f32((dd >> 16) as u16) * (sc >> 4) as f32;
        let mut out = [0.0f32; 16];
        crate::unroll4!(i < 4 => {
            let codes = (w[i] >> (2 * j)) & 0x0303_0303;
            crate::unroll4!(b < 4 => {
                let q = (codes >> (8 * b)) & 0xFF;
                out[4 * i + b] = dl * q as f32 - ml;
            });
        });
        out
    }
}

#[amdgpu_device]
impl QuantBlock for BlockQ3K {
    const MATVEC_LANES: [u32; 4] = [64, 64, 32, 32];
    const MATVEC_ROWS_8: u32 = 4;
    const UNIT_BIAS: i32 = 4;
    const MATVEC_ROWS_PAIR: u32 = 1;
    const ELEMS: usize = QK_K;
    const GGML_TYPE: u32 = 11;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            // As Q2_K; the third bit of a code adds 4 and the offset takes the
            // 4 away again when it is clear (group16's `- 4`).
            let u = u & 7;
            let (h, sub, jp) = (u >> 2, (u >> 1) & 1, u & 1);
            let w = read16::<{ align_in_array(110, 32) }>(byte_at(self, 32 + 32 * h + 16 * sub));
            let m = read16::<{ align_in_array(110, 16) }>(byte_at(self, 16 * sub));
            let d = f16_bits_to_f32(self.d.0);
            let mut out = Unit8 {
                codes: [0; 8],
                scale: [0.0; 2],
                offset: [0.0; 2],
                group: [0; 2],
            };
            crate::unroll4!(half < 2 => {
                let j = 2 * jp + half;
                let g = 8 * h + 2 * j + sub;
                crate::unroll4!(i < 4 => {
                    out.codes[4 * half + i] = ((w[i] >> (2 * j)) & 0x0303_0303)
                        | (((m[i] >> (4 * h + j)) & 0x0101_0101) << 2);
                });
                let dl = d * q3k_scale(g, &self.scales) as f32;
                out.scale[half] = dl;
                out.offset[half] = -4.0 * dl;
                out.group[half] = g as u32;
            });
            out
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        // Laid out as Q2_K; the third bit of the element at byte offset b of
        // its half is bit 4 h + j of hmask[b].
        let g = g & 15;
        let (h, j, sub) = (g >> 3, (g >> 1) & 3, g & 1);
        let dl = f16_bits_to_f32(self.d.0) * q3k_scale(g, &self.scales) as f32;
        let mask = 1u8 << (4 * h + j);
        let mut out = [0.0f32; 16];
        for (l, o) in out.iter_mut().enumerate() {
            let low = ((self.qs[32 * h + 16 * sub + l] >> (2 * j)) & 3) as i32;
            let minus = if self.hmask[16 * sub + l] & mask != 0 {
                0
            } else {
                4
            };
            *o = dl * (low - minus) as f32;
        }
        out
    }
    #[inline(always)]
    unsafe fn group16_wide(&self, g: usize) -> [f32; 16] {
        // group16's `low - minus` is unit8's code (low bits, the third bit
        // as 4) less 4: the same integer, so the same product.
        let g = g & 15;
        let (h, j, sub) = (g >> 3, (g >> 1) & 3, g & 1);
        let (w, m) = unsafe {
            (
                read16::<{ align_in_array(110, 32) }>(byte_at(self, 32 + 32 * h + 16 * sub)),
                read16::<{ align_in_array(110, 16) }>(byte_at(self, 16 * sub)),
            )
        };
        let dl = f16_bits_to_f32(self.d.0) * q3k_scale(g, &self.scales) as f32;
        let mut out = [0.0f32; 16];
        crate::unroll4!(i < 4 => {
            let codes = ((w[i] >> (2 * j)) & 0x0303_0303) | (((m[i] >> (4 * h + j)) & 0x0101_0101) << 2);
            crate::unroll4!(b < 4 => {
                let code = ((codes >> (8 * b)) & 0xFF) as i32;
                out[4 * i + b] = dl * (code - 4) as f32;
            });
        });
        out
    }
}

#[amdgpu_device]
impl QuantBlock for BlockQ4K {
    const MATVEC_LANES: [u32; 4] = [64, 128, 32, 32];
    const UNIT_HAS_MIN: bool = true;
    const ELEMS: usize = QK_K;
    const GGML_TYPE: u32 = 12;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            // Unit u: bytes 16 u of qs; low nibbles are group 4 (u / 2) + u % 2
            // (sub-block u / 2 * 2), high nibbles two groups on.
            let u = u & 7;
            let c = u >> 1;
            let w = read16::<{ align_in_array(144, 16) }>(byte_at(self, 16 + 16 * u));
            // AMD: the conversion instruction here tipped `qmatvec4_q4_k_*`
            // on gfx90a into VGPR spills; the written-out form (the same
            // value) leaves it room.
            #[cfg(not(ferrocm_nvptx))]
            let cvt = crate::elem::f16_bits_to_f32_written;
            #[cfg(ferrocm_nvptx)]
            let cvt = f16_bits_to_f32;
            let (d, dmin) = (cvt(self.d.0), cvt(self.dmin.0));
            let (s0, m0) = k4_scale_min(2 * c, &self.scales);
            let (s1, m1) = k4_scale_min(2 * c + 1, &self.scales);
            let g = (4 * c + (u & 1)) as u32;
            Unit8 {
                codes: nibbles(w),
                scale: [d * s0 as f32, d * s1 as f32],
                offset: [-(dmin * m0 as f32), -(dmin * m1 as f32)],
                group: [g, g + 2],
            }
        }
    }
    #[inline(always)]
    unsafe fn unit8_shared(&self, u: usize) -> Unit8 {
        unsafe { k4_unit8_shared(self, u) }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        // Sub-block s = g / 2: chunk s / 2 (32 bytes of qs), low or high
        // nibbles.
        let g = g & 15;
        let s = g >> 1;
        let (sc, m) = k4_scale_min(s, &self.scales);
        let d1 = f16_bits_to_f32(self.d.0) * sc as f32;
        let m1 = f16_bits_to_f32(self.dmin.0) * m as f32;
        let base = 32 * (s >> 1) + 16 * (g & 1);
        let shift = 4 * (s & 1);
        let mut out = [0.0f32; 16];
        for (l, o) in out.iter_mut().enumerate() {
            *o = d1 * ((self.qs[base + l] >> shift) & 0xF) as f32 - m1;
        }
        out
    }
    #[inline(always)]
    unsafe fn group16_wide(&self, g: usize) -> [f32; 16] {
        let g = g & 15;
        let s = g >> 1;
        let (sc, m) = k4_scale_min(s, &self.scales);
        let d1 = f16_bits_to_f32(self.d.0) * sc as f32;
        let m1 = f16_bits_to_f32(self.dmin.0) * m as f32;
        let off = 16 + 32 * (s >> 1) + 16 * (g & 1);
        let w = unsafe { read16::<{ align_in_array(144, 16) }>(byte_at(self, off)) };
        let shift = 4 * (s & 1);
        let mut out = [0.0f32; 16];
        crate::unroll4!(i < 4 => {
            let codes = (w[i] >> shift) & 0x0F0F_0F0F;
            crate::unroll4!(b < 4 => {
                let q = (codes >> (8 * b)) & 0xFF;
                out[4 * i + b] = d1 * q as f32 - m1;
            });
        });
        out
    }
}

#[amdgpu_device]
impl QuantBlock for BlockQ5K {
    // 64 at one row of x: a 7B decode 324.3 -> 335.1 tokens/s on an H100
    // (14336 x 4096 21.6 -> 18.5 us; 4096 x 14336 17.6 -> 17.9).
    const MATVEC_LANES: [u32; 4] = [64, 64, 32, 32];
    const MATVEC_ROWS_8: u32 = 4;
    const UNIT_HAS_MIN: bool = true;
    const MATVEC_ROWS_PAIR: u32 = 1;
    const MATVEC_ROWS_WIDE: u32 = 1;
    const DEQUANT_GROUPS: u32 = 2;
    const ELEMS: usize = QK_K;
    const GGML_TYPE: u32 = 13;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            // As Q4_K; the fifth bit of sub-block s is bit s of qh at the same
            // offset in its 32-byte chunk.
            let u = u & 7;
            let c = u >> 1;
            let w = read16::<{ align_in_array(176, 16) }>(byte_at(self, 48 + 16 * u));
            let qh = read16::<{ align_in_array(176, 16) }>(byte_at(self, 16 + 16 * (u & 1)));
            let mut codes = nibbles(w);
            crate::unroll4!(i < 4 => {
                codes[i] |= ((qh[i] >> (2 * c)) & 0x0101_0101) << 4;
                codes[4 + i] |= ((qh[i] >> (2 * c + 1)) & 0x0101_0101) << 4;
            });
            let (d, dmin) = (f16_bits_to_f32(self.d.0), f16_bits_to_f32(self.dmin.0));
            let (s0, m0) = k4_scale_min(2 * c, &self.scales);
            let (s1, m1) = k4_scale_min(2 * c + 1, &self.scales);
            let g = (4 * c + (u & 1)) as u32;
            Unit8 {
                codes,
                scale: [d * s0 as f32, d * s1 as f32],
                offset: [-(dmin * m0 as f32), -(dmin * m1 as f32)],
                group: [g, g + 2],
            }
        }
    }
    #[inline(always)]
    unsafe fn unit8_shared(&self, u: usize) -> Unit8 {
        unsafe { k4_unit8_shared(self, u) }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        // As Q4_K; the fifth bit of sub-block s is bit s of qh[offset in
        // the 32-byte chunk].
        let g = g & 15;
        let s = g >> 1;
        let (sc, m) = k4_scale_min(s, &self.scales);
        let d1 = f16_bits_to_f32(self.d.0) * sc as f32;
        let m1 = f16_bits_to_f32(self.dmin.0) * m as f32;
        let off = 16 * (g & 1);
        let base = 32 * (s >> 1) + off;
        let shift = 4 * (s & 1);
        let mut out = [0.0f32; 16];
        for (l, o) in out.iter_mut().enumerate() {
            let q = ((self.qs[base + l] >> shift) & 0xF) as u32
                | ((((self.qh[off + l] >> s) & 1) as u32) << 4);
            *o = d1 * q as f32 - m1;
        }
        out
    }
    #[inline(always)]
    unsafe fn group16_wide(&self, g: usize) -> [f32; 16] {
        let g = g & 15;
        let s = g >> 1;
        let off = 16 * (g & 1);
        // The scales by bytes, as group16: read with d and dmin as one
        // 16-byte word the kernel ran 1.3% slower (H200).
        let (sc, m) = k4_scale_min(s, &self.scales);
        let d1 = f16_bits_to_f32(self.d.0) * sc as f32;
        let m1 = f16_bits_to_f32(self.dmin.0) * m as f32;
        let (w, qh) = unsafe {
            (
                read16::<{ align_in_array(176, 16) }>(byte_at(self, 48 + 32 * (s >> 1) + off)),
                read16::<{ align_in_array(176, 16) }>(byte_at(self, 16 + off)),
            )
        };
        let shift = 4 * (s & 1);
        let mut out = [0.0f32; 16];
        crate::unroll4!(i < 4 => {
            let codes = ((w[i] >> shift) & 0x0F0F_0F0F) | (((qh[i] >> s) & 0x0101_0101) << 4);
            crate::unroll4!(b < 4 => {
                let q = (codes >> (8 * b)) & 0xFF;
                out[4 * i + b] = d1 * q as f32 - m1;
            });
        });
        out
    }
}

#[amdgpu_device]
impl QuantBlock for BlockQ6K {
    const MATVEC_LANES: [u32; 4] = [128, 64, 32, 64];
    const UNIT_BIAS: i32 = 32;
    const DEQUANT_GROUPS: u32 = 2;
    const ELEMS: usize = QK_K;
    const GGML_TYPE: u32 = 14;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            // Unit u: half h, ql bytes 32 kk + 16 sub of it (low nibbles: quarter
            // kk, high: quarter kk + 2), their high bits in qh's bit pairs.
            let u = u & 7;
            let (h, kk, sub) = (u >> 2, (u >> 1) & 1, u & 1);
            let lo =
                read16::<{ align_in_array(210, 16) }>(byte_at(self, 64 * h + 32 * kk + 16 * sub));
            let hi = read16::<{ align_in_array(210, 16) }>(byte_at(self, 128 + 32 * h + 16 * sub));
            let mut codes = nibbles(lo);
            crate::unroll4!(i < 4 => {
                codes[i] |= ((hi[i] >> (2 * kk)) & 0x0303_0303) << 4;
                codes[4 + i] |= ((hi[i] >> (2 * kk + 4)) & 0x0303_0303) << 4;
            });
            let d = f16_bits_to_f32(self.d.0);
            let g0 = 8 * h + 2 * kk + sub;
            let (d0, d1) = (d * self.scales[g0] as f32, d * self.scales[g0 + 4] as f32);
            Unit8 {
                codes,
                scale: [d0, d1],
                offset: [-32.0 * d0, -32.0 * d1],
                group: [g0 as u32, g0 as u32 + 4],
            }
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        // Group g: half h (64 bytes of ql, 32 of qh), quarter k of the half
        // (ql bytes 0..32 or 32..64, low or high nibbles; bit pair k of qh),
        // first or second 16 of those bytes.
        let g = g & 15;
        let (h, k, sub) = (g >> 3, (g >> 1) & 3, g & 1);
        let d = f16_bits_to_f32(self.d.0) * self.scales[g] as f32;
        let lo_base = 64 * h + 32 * (k & 1) + 16 * sub;
        let hi_base = 32 * h + 16 * sub;
        let lo_shift = 4 * (k >> 1);
        let mut out = [0.0f32; 16];
        for (l, o) in out.iter_mut().enumerate() {
            let lo = (self.ql[lo_base + l] >> lo_shift) & 0xF;
            let hi = (self.qh[hi_base + l] >> (2 * k)) & 3;
            *o = d * ((lo | (hi << 4)) as i32 - 32) as f32;
        }
        out
    }
    #[inline(always)]
    unsafe fn group16_wide(&self, g: usize) -> [f32; 16] {
        let g = g & 15;
        let (h, k, sub) = (g >> 3, (g >> 1) & 3, g & 1);
        let d = f16_bits_to_f32(self.d.0) * self.scales[g] as f32;
        let (lo, hi) = unsafe {
            (
                read16::<{ align_in_array(210, 16) }>(byte_at(
                    self,
                    64 * h + 32 * (k & 1) + 16 * sub,
                )),
                read16::<{ align_in_array(210, 16) }>(byte_at(self, 128 + 32 * h + 16 * sub)),
            )
        };
        let lo_shift = 4 * (k >> 1);
        let mut out = [0.0f32; 16];
        crate::unroll4!(i < 4 => {
            let codes = ((lo[i] >> lo_shift) & 0x0F0F_0F0F) | (((hi[i] >> (2 * k)) & 0x0303_0303) << 4);
            crate::unroll4!(b < 4 => {
                let q = ((codes >> (8 * b)) & 0xFF) as i32;
                out[4 * i + b] = d * (q - 32) as f32;
            });
        });
        out
    }
}

#[amdgpu_device]
impl QuantBlock for BlockQ8K {
    const MATVEC_ROWS_8: u32 = 4;
    // Paired groups, but the one load of both scales was slower here
    // (H200, 4096 x 14336, one row of x: 21.8 -> 25.2 us).
    const PAIRED_GROUPS: bool = false;
    const ELEMS: usize = QK_K;
    const GGML_TYPE: u32 = 15;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            let u = u & 7;
            let a = read16::<{ align_in_array(292, 4) }>(byte_at(self, 4 + 32 * u));
            let b = read16::<{ align_in_array(292, 4) }>(byte_at(self, 20 + 32 * u));
            let c = [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]];
            unit(c, self.d, 0.0, 2 * u as u32, 2 * u as u32 + 1)
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        let base = 16 * (g & 15);
        let mut out = [0.0f32; 16];
        for (l, o) in out.iter_mut().enumerate() {
            *o = self.d * self.qs[base + l] as f32;
        }
        out
    }
    #[inline(always)]
    unsafe fn group16_wide(&self, g: usize) -> [f32; 16] {
        let off = 4 + 16 * (g & 15);
        let w = unsafe { read16::<{ align_in_array(292, 4) }>(byte_at(self, off)) };
        signed_bytes_times(w, self.d)
    }
}

/// Group `g` of a 32-element block of 4-bit codes into a 16-value table.
#[amdgpu_device]
#[inline(always)]
fn table_group(qs: &[u8; 16], table: [u64; 2], d: f32, g: usize) -> [f32; 16] {
    let shift = 4 * (g & 1);
    let mut out = [0.0f32; 16];
    for (l, o) in out.iter_mut().enumerate() {
        *o = d * lookup16(table, (qs[l] >> shift) & 0xF) as f32;
    }
    out
}

#[amdgpu_device]
impl QuantBlock for BlockIq4Nl {
    // Two weight rows a workitem at one row of x: H100, 4096 x 14336 14.7
    // -> 14.5 us (rotated 17.0 -> 16.6), 14336 x 4096 16.7 -> 15.1.
    const MATVEC_ROWS: u32 = 2;
    // 64 at one row of x: H100, 14336 x 4096 21.0 -> 16.8 us, 4096 x 14336
    // 15.9 -> 15.1.
    const MATVEC_LANES: [u32; 4] = [64, 64, 32, 32];
    const PAIRED_GROUPS: bool = true;
    const DEQUANT_GROUPS: u32 = 2;
    const ELEMS: usize = 32;
    const GGML_TYPE: u32 = 20;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            let w = read16::<{ align_in_array(18, 2) }>(byte_at(self, 2));
            unit(
                table_nibbles(IQ4NL_WORDS, w),
                f16_bits_to_f32(self.d.0),
                0.0,
                0,
                1,
            )
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        table_group(&self.qs, IQ4NL_PACKED, f16_bits_to_f32(self.d.0), g)
    }
}

#[amdgpu_device]
impl QuantBlock for BlockIq4Xs {
    // Two weight rows a workitem at one row of x: H100, 4096 x 14336 14.9
    // -> 14.4 us (rotated 17.9 -> 16.1), 14336 x 4096 17.1 -> 15.9.
    const MATVEC_ROWS: u32 = 2;
    const MATVEC_LANES: [u32; 4] = [64, 64, 32, 32];
    const MATVEC_ROWS_8: u32 = 4;
    const PAIRED_GROUPS: bool = true;
    const ELEMS: usize = QK_K;
    const GGML_TYPE: u32 = 23;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            let ib = u & 7;
            let w = read16::<{ align_in_array(136, 8) }>(byte_at(self, 8 + 16 * ib));
            // d, scales_h and scales_l in one 8-byte load (blocks of 136
            // bytes keep 8-byte alignment).
            let head = (byte_at(self, 0) as *const u64).read();
            let scales_l = (head >> 32) as u32;
            let low = (scales_l >> (4 * ib)) & 0xF;
            let high = ((head >> 16) as u32 >> (2 * ib)) & 3;
            let dl = f16_bits_to_f32(head as u16) * ((low | (high << 4)) as i32 - 32) as f32;
            unit(
                table_nibbles(IQ4NL_WORDS, w),
                dl,
                0.0,
                2 * ib as u32,
                2 * ib as u32 + 1,
            )
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        let g = g & 15;
        let ib = g >> 1;
        let low = (self.scales_l[ib >> 1] >> (4 * (ib & 1))) & 0xF;
        let high = ((self.scales_h >> (2 * ib)) & 3) as u8;
        let dl = f16_bits_to_f32(self.d.0) * ((low | (high << 4)) as i32 - 32) as f32;
        let base = 16 * ib;
        let shift = 4 * (g & 1);
        let mut out = [0.0f32; 16];
        for (l, o) in out.iter_mut().enumerate() {
            *o = dl * lookup16(IQ4NL_PACKED, (self.qs[base + l] >> shift) & 0xF) as f32;
        }
        out
    }
    #[inline(always)]
    unsafe fn group16_wide(&self, g: usize) -> [f32; 16] {
        let g = g & 15;
        let ib = g >> 1;
        let (head, w) = unsafe {
            (
                // d, scales_h and scales_l, as unit8 reads them.
                (byte_at(self, 0) as *const u64).read(),
                read16::<{ align_in_array(136, 8) }>(byte_at(self, 8 + 16 * ib)),
            )
        };
        let low = ((head >> 32) as u32 >> (4 * ib)) & 0xF;
        let high = ((head >> 16) as u32 >> (2 * ib)) & 3;
        let dl = f16_bits_to_f32(head as u16) * ((low | (high << 4)) as i32 - 32) as f32;
        table_group16(IQ4NL_WORDS, w, 4 * (g & 1), dl)
    }
}

#[amdgpu_device]
impl QuantBlock for BlockMxfp4 {
    const PAIRED_GROUPS: bool = true;
    const DEQUANT_GROUPS: u32 = 2;
    const ELEMS: usize = 32;
    const GGML_TYPE: u32 = 39;
    const MATVEC_ROWS: u32 = 2;
    #[inline(always)]
    unsafe fn unit8(&self, u: usize) -> Unit8 {
        let _ = u;
        unsafe {
            let w = read16::<{ align_in_array(17, 1) }>(byte_at(self, 1));
            unit(
                table_nibbles(MXFP4_WORDS, w),
                e8m0_half_to_f32(self.e),
                0.0,
                0,
                1,
            )
        }
    }
    #[inline(always)]
    fn group16(&self, g: usize) -> [f32; 16] {
        let d = e8m0_half_to_f32(self.e);
        let shift = 4 * (g & 1);
        let mut out = [0.0f32; 16];
        for (l, o) in out.iter_mut().enumerate() {
            *o = lookup16(MXFP4_PACKED, (self.qs[l] >> shift) & 0xF) as f32 * d;
        }
        out
    }
    #[inline(always)]
    unsafe fn group16_wide(&self, g: usize) -> [f32; 16] {
        let d = e8m0_half_to_f32(self.e);
        let w = unsafe { read16::<{ align_in_array(17, 1) }>(byte_at(self, 1)) };
        table_group16(MXFP4_WORDS, w, 4 * (g & 1), d)
    }
}

/// A format with GGML's reference quantizer (`quantize_row_*_ref`):
/// bit-exact with it for every finite input (the scale computed in f32 and
/// rounded to f16 to nearest even; the codes from the f32 scale, as GGML's).
#[amdgpu_device]
pub trait QuantizeBlock: QuantBlock {
    /// The block holding `x[..ELEMS]` (shorter input is a caller error:
    /// the missing values read as 0).
    fn quantize(x: &[f32]) -> Self;
}

/// |v| (fabsf: the sign bit cleared).
#[amdgpu_device]
#[inline(always)]
fn fabs(v: f32) -> f32 {
    f32::from_bits(v.to_bits() & 0x7fff_ffff)
}

/// `x[i]`, or 0 past the end.
#[amdgpu_device]
#[inline(always)]
fn at(x: &[f32], i: usize) -> f32 {
    if i < x.len() { x[i] } else { 0.0 }
}

/// The value of largest magnitude among `x[..n]` (the first on ties;
/// NaN never wins), and its magnitude.
#[amdgpu_device]
#[inline(always)]
fn signed_absmax(x: &[f32], n: usize) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for j in 0..n {
        let v = at(x, j);
        if amax < fabs(v) {
            amax = fabs(v);
            max = v;
        }
    }
    (max, amax)
}

/// The smallest and largest of `x[..n]` (from ±f32::MAX, as GGML starts).
#[amdgpu_device]
#[inline(always)]
fn min_max(x: &[f32], n: usize) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for j in 0..n {
        let v = at(x, j);
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `1 / d`, or 0 for a zero scale.
#[amdgpu_device]
#[inline(always)]
fn inverse(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

#[amdgpu_device]
impl QuantizeBlock for BlockQ4_0 {
    fn quantize(x: &[f32]) -> Self {
        let (max, _) = signed_absmax(x, 32);
        let d = max / -8.0;
        let id = inverse(d);
        let mut qs = [0u8; 16];
        for (j, q) in qs.iter_mut().enumerate() {
            let x0 = ((at(x, j) * id + 8.5) as i8).min(15) as u8;
            let x1 = ((at(x, j + 16) * id + 8.5) as i8).min(15) as u8;
            *q = x0 | (x1 << 4);
        }
        Self {
            d: F16(f32_to_f16_bits(d)),
            qs,
        }
    }
}

#[amdgpu_device]
impl QuantizeBlock for BlockQ4_1 {
    fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(x, 32);
        let d = (max - min) / 15.0;
        let id = inverse(d);
        let mut qs = [0u8; 16];
        for (j, q) in qs.iter_mut().enumerate() {
            let x0 = (((at(x, j) - min) * id + 0.5) as i8).min(15) as u8;
            let x1 = (((at(x, j + 16) - min) * id + 0.5) as i8).min(15) as u8;
            *q = x0 | (x1 << 4);
        }
        Self {
            d: F16(f32_to_f16_bits(d)),
            m: F16(f32_to_f16_bits(min)),
            qs,
        }
    }
}

/// Packs 32 five-bit codes as Q5_0/Q5_1 store them.
#[amdgpu_device]
#[inline(always)]
fn q5_pack(codes: impl Fn(usize) -> u8) -> ([u8; 4], [u8; 16]) {
    let (mut qh, mut qs) = (0u32, [0u8; 16]);
    for (j, q) in qs.iter_mut().enumerate() {
        let (x0, x1) = (codes(j), codes(j + 16));
        *q = (x0 & 0xF) | ((x1 & 0xF) << 4);
        qh |= (((x0 & 0x10) >> 4) as u32) << j;
        qh |= (((x1 & 0x10) >> 4) as u32) << (j + 16);
    }
    (qh.to_le_bytes(), qs)
}

#[amdgpu_device]
impl QuantizeBlock for BlockQ5_0 {
    fn quantize(x: &[f32]) -> Self {
        let (max, _) = signed_absmax(x, 32);
        let d = max / -16.0;
        let id = inverse(d);
        let (qh, qs) = q5_pack(|j| ((at(x, j) * id + 16.5) as i8).min(31) as u8);
        Self {
            d: F16(f32_to_f16_bits(d)),
            qh,
            qs,
        }
    }
}

#[amdgpu_device]
impl QuantizeBlock for BlockQ5_1 {
    fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(x, 32);
        let d = (max - min) / 31.0;
        let id = inverse(d);
        let (qh, qs) = q5_pack(|j| ((at(x, j) - min) * id + 0.5) as u8);
        Self {
            d: F16(f32_to_f16_bits(d)),
            m: F16(f32_to_f16_bits(min)),
            qh,
            qs,
        }
    }
}

/// Q8_0/Q8_1's scale and codes: `amax / 127`, codes rounded half away from
/// zero.
#[amdgpu_device]
#[inline(always)]
fn q8_codes(x: &[f32]) -> (f32, [i8; 32]) {
    let mut amax = 0.0f32;
    for j in 0..32 {
        // GGML's MAX(a, b): `a > b ? a : b`, NaN handling included.
        let v = fabs(at(x, j));
        amax = if amax > v { amax } else { v };
    }
    let d = amax / 127.0;
    let id = inverse(d);
    let mut qs = [0i8; 32];
    for (j, q) in qs.iter_mut().enumerate() {
        *q = crate::math::round(at(x, j) * id) as i8;
    }
    (d, qs)
}

#[amdgpu_device]
impl QuantizeBlock for BlockQ8_0 {
    fn quantize(x: &[f32]) -> Self {
        let (d, qs) = q8_codes(x);
        Self {
            d: F16(f32_to_f16_bits(d)),
            qs,
        }
    }
}

#[amdgpu_device]
impl QuantizeBlock for BlockQ8_1 {
    fn quantize(x: &[f32]) -> Self {
        let (d, qs) = q8_codes(x);
        let mut sum = 0i32;
        for &q in qs.iter() {
            sum += q as i32;
        }
        Self {
            d: F16(f32_to_f16_bits(d)),
            s: F16(f32_to_f16_bits(sum as f32 * d)),
            qs,
        }
    }
}

/// Calls `$m!` with every block type and its lower-case format name.
#[macro_export]
macro_rules! for_each_block {
    ($m:ident) => {
        $m! {
            q4_0: BlockQ4_0, q4_1: BlockQ4_1, q5_0: BlockQ5_0, q5_1: BlockQ5_1,
            q8_0: BlockQ8_0, q8_1: BlockQ8_1, q2_k: BlockQ2K, q3_k: BlockQ3K,
            q4_k: BlockQ4K, q5_k: BlockQ5K, q6_k: BlockQ6K, q8_k: BlockQ8K,
            iq4_nl: BlockIq4Nl, iq4_xs: BlockIq4Xs, mxfp4: BlockMxfp4,
        }
    };
}

// Host side: blocks are plain bytes, so buffers of them can be viewed and
// uploaded (every field is an integer or f32; repr(C) with no padding, as
// the size checks above prove).
#[cfg(not(ferrocm_device))]
const _: () = {
    macro_rules! pod {
        ($($name:ident: $t:ident,)*) => {$(
            unsafe impl bytemuck::Zeroable for $t {}
            unsafe impl bytemuck::Pod for $t {}
        )*};
    }
    for_each_block!(pod);
};
