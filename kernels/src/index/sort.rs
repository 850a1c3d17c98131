//! Sorting rows and top-k, for every dtype, ascending or descending, stable,
//! NaN above every number as PyTorch ranks it (last ascending, first
//! descending; the first of `topk(largest)`), -0 equal to +0:
//! - `sort_rows_{dtype}`: rows of at most [`SORT_TILE`] elements, one
//!   workgroup per row, a bitonic network in LDS;
//! - `sort_tiles_{dtype}` then `sort_merge_{dtype}` passes: longer rows (any
//!   length), tiles of [`SORT_TILE`] sorted in LDS, then runs merged pairwise
//!   (merge path: each workitem finds where its outputs start by a binary
//!   search, then merges [`MERGE_ITEMS`] of them), the last pass writing the
//!   values and indices;
//! - `topk_{dtype}`: the first `k` (at most [`TOPK_MAX`]) of each row in
//!   sorted order, without sorting the row: a radix select finds the k-th key
//!   (11 bits per pass, a histogram in LDS), one ordered pass collects the
//!   `k` winners (ties at the threshold by lowest index), which are sorted in
//!   LDS.
//!
//! Every element becomes an unsigned key ([`SortKey`]) whose order is the
//! requested one, and equal keys are ordered by their index: so each
//! network sorts distinct `(key, index)` pairs, which makes it stable.

use crate::device::*;
use crate::elem::*;
use crate::kernels;
use rocm_kernel_macros::{amdgpu_device, amdgpu_global};

/// Elements one workgroup sorts in LDS (a power of two).
#[amdgpu_device]
pub const SORT_TILE: u32 = 2048;

/// Workitems per workgroup of the sort and top-k launches.
#[amdgpu_device]
pub const SORT_BLOCK: u32 = 256;

/// Outputs each workitem of a merge pass writes (divides [`SORT_TILE`]).
#[amdgpu_device]
pub const MERGE_ITEMS: u32 = 8;

/// Largest `k` the top-k kernel takes (a power of two); beyond it the op
/// sorts the rows.
#[amdgpu_device]
pub const TOPK_MAX: u32 = 1024;

/// Segment length of a long row's top-k: rows of at least 4 segments are
/// cut into segments of this many elements, each a workgroup's (the op
/// then takes the top k of their winners).
#[amdgpu_device]
pub const TOPK_SEGMENT: u32 = 8192;

/// Bits of the key a radix-select pass looks at.
#[amdgpu_device]
pub const DIGIT_BITS: u32 = 11;

/// Histogram bins of a radix-select pass.
#[amdgpu_device]
pub const BINS: u32 = 1 << DIGIT_BITS;

/// An unsigned sort key: u32 for every dtype but i64 (u64).
#[amdgpu_device]
pub trait KeyWord: Copy + PartialOrd + 'static {
    /// The largest key (NaN's, and the padding of a network).
    const MAX: Self;
    /// Bits in the key.
    const BITS: u32;
    /// Bits `shift..shift + bits` as a bin.
    fn digit(self, shift: u32, bits: u32) -> u32;
    /// `self & mask == prefix`, with `mask` and `prefix` given as keys.
    fn matches(self, mask: Self, prefix: Self) -> bool;
    /// `self | (d << shift)`.
    fn with_digit(self, d: u32, shift: u32) -> Self;
    /// The zero key.
    const ZERO: Self;
    /// The key as u64 (zero-extended).
    fn to_u64(self) -> u64;
    /// From the low bits of `v`.
    fn from_u64(v: u64) -> Self;
}

#[amdgpu_device]
impl KeyWord for u32 {
    const MAX: Self = u32::MAX;
    const BITS: u32 = 32;
    const ZERO: Self = 0;
    #[inline(always)]
    fn digit(self, shift: u32, bits: u32) -> u32 {
        (self >> shift) & ((1 << bits) - 1)
    }
    #[inline(always)]
    fn matches(self, mask: Self, prefix: Self) -> bool {
        self & mask == prefix
    }
    #[inline(always)]
    fn with_digit(self, d: u32, shift: u32) -> Self {
        self | (d << shift)
    }
    #[inline(always)]
    fn to_u64(self) -> u64 {
        self as u64
    }
    #[inline(always)]
    fn from_u64(v: u64) -> Self {
        v as u32
    }
}

#[amdgpu_device]
impl KeyWord for u64 {
    const MAX: Self = u64::MAX;
    const BITS: u32 = 64;
    const ZERO: Self = 0;
    #[inline(always)]
    fn digit(self, shift: u32, bits: u32) -> u32 {
        ((self >> shift) & ((1u64 << bits) - 1)) as u32
    }
    #[inline(always)]
    fn matches(self, mask: Self, prefix: Self) -> bool {
        self & mask == prefix
    }
    #[inline(always)]
    fn with_digit(self, d: u32, shift: u32) -> Self {
        self | ((d as u64) << shift)
    }
    #[inline(always)]
    fn to_u64(self) -> u64 {
        self
    }
    #[inline(always)]
    fn from_u64(v: u64) -> Self {
        v
    }
}

/// An element type's sort key: unsigned, in the order the sort wants
/// (reversed for descending), -0 as +0, and NaN above every number as
/// PyTorch ranks it: [`KeyWord::MAX`] (last) ascending, zero (first)
/// descending.
#[amdgpu_device]
pub trait SortKey: Elem {
    /// The key type.
    type Key: KeyWord;
    /// The key of `self`.
    fn sort_key(self, descending: bool) -> Self::Key;
}

/// The key of an IEEE float of `BITS` bits given as its bits (`exp_mask`:
/// the exponent bits, all set for inf and NaN).
#[amdgpu_device]
#[inline(always)]
pub fn float_key(bits: u32, sign: u32, exp_mask: u32, descending: bool) -> u32 {
    let magnitude = bits & !sign;
    if magnitude > exp_mask {
        // NaN ranks above +inf (PyTorch): last ascending, first descending.
        // Every number's descending key is above 0 (+inf's is the mantissa
        // mask), so NaNs come first, among themselves in index order.
        return if descending { 0 } else { u32::MAX };
    }
    let bits = if magnitude == 0 { 0 } else { bits };
    // Negative: all bits flipped (larger magnitude first); positive: above
    // every negative.
    let ordered = if bits & sign != 0 {
        !bits & (sign | (sign - 1))
    } else {
        bits | sign
    };
    if descending {
        (sign | (sign - 1)) - ordered
    } else {
        ordered
    }
}

#[amdgpu_device]
impl SortKey for f32 {
    type Key = u32;
    #[inline(always)]
    fn sort_key(self, descending: bool) -> u32 {
        float_key(self.to_bits(), 0x8000_0000, 0x7f80_0000, descending)
    }
}

#[amdgpu_device]
impl SortKey for F16 {
    type Key = u32;
    #[inline(always)]
    fn sort_key(self, descending: bool) -> u32 {
        float_key(self.0 as u32, 0x8000, 0x7c00, descending)
    }
}

#[amdgpu_device]
impl SortKey for Bf16 {
    type Key = u32;
    #[inline(always)]
    fn sort_key(self, descending: bool) -> u32 {
        float_key(self.0 as u32, 0x8000, 0x7f80, descending)
    }
}

#[amdgpu_device]
impl SortKey for u8 {
    type Key = u32;
    #[inline(always)]
    fn sort_key(self, descending: bool) -> u32 {
        if descending {
            255 - self as u32
        } else {
            self as u32
        }
    }
}

#[amdgpu_device]
impl SortKey for u32 {
    type Key = u32;
    #[inline(always)]
    fn sort_key(self, descending: bool) -> u32 {
        if descending { !self } else { self }
    }
}

#[amdgpu_device]
impl SortKey for i64 {
    type Key = u64;
    #[inline(always)]
    fn sort_key(self, descending: bool) -> u64 {
        let k = self as u64 ^ (1 << 63);
        if descending { !k } else { k }
    }
}

/// Whether pair `(ka, ia)` sorts after `(kb, ib)`.
#[amdgpu_device]
#[inline(always)]
fn pair_after<K: KeyWord>(ka: K, ia: u32, kb: K, ib: u32) -> bool {
    kb < ka || (kb == ka && ib < ia)
}

/// `(key, index)` pairs in LDS: for 32-bit keys one u64 word each (key in
/// the high half: one 8-byte LDS access per pair, half the accesses of two
/// arrays), else an array of keys then one of indices. `n` pairs take
/// `n * (size_of::<K>() + 4)` bytes either way.
#[amdgpu_device]
#[derive(Clone, Copy)]
pub struct Pairs<K> {
    keys: Lds<K>,
    idx: Lds<u32>,
    packed: Lds<u64>,
}

#[amdgpu_device]
impl<K: KeyWord> Pairs<K> {
    /// Room for `n` pairs from the first byte of the launch's LDS.
    #[inline(always)]
    pub fn at_start(n: u32) -> Self {
        Self::at(0, n)
    }

    /// Room for `n` pairs from `byte_offset` (a multiple of 8) of the
    /// launch's LDS.
    #[inline(always)]
    pub fn at(byte_offset: u32, n: u32) -> Self {
        Self {
            keys: lds_at::<K>(byte_offset),
            idx: lds_at::<u32>(byte_offset + n * size_of::<K>() as u32),
            packed: lds_at::<u64>(byte_offset),
        }
    }

    /// Pair `i`.
    #[inline(always)]
    pub fn load(self, i: u32) -> (K, u32) {
        if K::BITS == 32 {
            let w = self.packed.load(i);
            (K::from_u64(w >> 32), w as u32)
        } else {
            (self.keys.load(i), self.idx.load(i))
        }
    }

    /// Sets pair `i`.
    #[inline(always)]
    pub fn store(self, i: u32, k: K, v: u32) {
        if K::BITS == 32 {
            self.packed.store(i, k.to_u64() << 32 | v as u64);
        } else {
            self.keys.store(i, k);
            self.idx.store(i, v);
        }
    }
}

/// Elements each workitem of [`bitonic_sort_lds`] holds in registers.
#[amdgpu_device]
pub const BITONIC_REGS: u32 = 8;

/// Compare-exchanges `(k[x], v[x])` and `(k[y], v[y])` so the smaller pair
/// comes first (`up`) or last.
#[amdgpu_device]
#[inline(always)]
fn exchange<K: KeyWord>(k: &mut [K; 8], v: &mut [u32; 8], x: usize, y: usize, up: bool) {
    if pair_after(k[x], v[x], k[y], v[y]) == up {
        k.swap(x, y);
        v.swap(x, y);
    }
}

/// One bitonic step of stride `S` (below [`BITONIC_REGS`]) over a
/// workitem's pairs, which start at network position `first`.
#[amdgpu_device]
#[inline(always)]
fn register_step<K: KeyWord, const S: usize>(
    k: &mut [K; 8],
    v: &mut [u32; 8],
    first: u32,
    size: u32,
) {
    let mut e = 0;
    while e < 8 {
        if e & S == 0 {
            exchange(k, v, e, e + S, (first + e as u32) & size == 0);
        }
        e += 1;
    }
}

/// Sorts the `p` (a power of two) pairs `(keys[i], idx[i])` in LDS,
/// ascending, with a bitonic network; every workitem of the group calls it.
/// Each workitem holds [`BITONIC_REGS`] consecutive pairs in registers and
/// does the steps of stride below that there; only the longer strides go
/// through LDS (with a barrier each). Networks too small, or larger than
/// the group holds in registers, run all in LDS.
#[amdgpu_device]
#[inline(always)]
pub fn bitonic_sort_lds<K: KeyWord>(pairs: Pairs<K>, p: u32) {
    let bs = workgroup_size_x();
    let tid = workitem_id_x();
    let r = BITONIC_REGS;
    if p < 2 * r || p / r > bs {
        bitonic_sort_pairs_only(pairs, p);
        return;
    }
    let active = tid < p / r;
    let first = tid * r;
    let mut k = [K::MAX; 8];
    let mut v = [u32::MAX; 8];
    let load_regs = |k: &mut [K; 8], v: &mut [u32; 8]| {
        if active {
            let mut e = 0;
            while e < 8 {
                (k[e], v[e]) = pairs.load(first + e as u32);
                e += 1;
            }
        }
    };
    let store_regs = |k: &[K; 8], v: &[u32; 8]| {
        if active {
            let mut e = 0;
            while e < 8 {
                pairs.store(first + e as u32, k[e], v[e]);
                e += 1;
            }
        }
    };
    load_regs(&mut k, &mut v);
    let mut size = 2;
    while size <= p {
        let mut stride = size / 2;
        if stride >= r {
            store_regs(&k, &v);
            barrier();
            while stride >= r {
                let mut t = tid;
                while t < p / 2 {
                    let lo = 2 * stride * (t / stride) + t % stride;
                    let hi = lo + stride;
                    let up = lo & size == 0;
                    let ((ka, ia), (kb, ib)) = (pairs.load(lo), pairs.load(hi));
                    if pair_after(ka, ia, kb, ib) == up {
                        pairs.store(lo, kb, ib);
                        pairs.store(hi, ka, ia);
                    }
                    t += bs;
                }
                barrier();
                stride /= 2;
            }
            load_regs(&mut k, &mut v);
        }
        // Strides below BITONIC_REGS: within this workitem's pairs (each a
        // constant, so the arrays stay in registers).
        if stride >= 4 {
            register_step::<K, 4>(&mut k, &mut v, first, size);
        }
        if stride >= 2 {
            register_step::<K, 2>(&mut k, &mut v, first, size);
        }
        register_step::<K, 1>(&mut k, &mut v, first, size);
        size *= 2;
    }
    store_regs(&k, &v);
    barrier();
}

/// [`bitonic_sort_lds`] with every step in LDS (a barrier after each): for
/// networks too small for the register steps, and for top-k's winners.
#[amdgpu_device]
#[inline(always)]
pub fn bitonic_sort_pairs_only<K: KeyWord>(pairs: Pairs<K>, p: u32) {
    let bs = workgroup_size_x();
    let tid = workitem_id_x();
    let mut size = 2;
    while size <= p {
        let mut stride = size / 2;
        while stride > 0 {
            let mut t = tid;
            while t < p / 2 {
                let lo = 2 * stride * (t / stride) + t % stride;
                let hi = lo + stride;
                let ((ka, ia), (kb, ib)) = (pairs.load(lo), pairs.load(hi));
                if pair_after(ka, ia, kb, ib) == (lo & size == 0) {
                    pairs.store(lo, kb, ib);
                    pairs.store(hi, ka, ia);
                }
                t += bs;
            }
            barrier();
            stride /= 2;
        }
        size *= 2;
    }
}

/// The smallest power of two at least `n` (`n` ≥ 1).
#[amdgpu_device]
#[inline(always)]
pub fn pow2_at_least(n: u32) -> u32 {
    let mut p = 1;
    while p < n {
        p *= 2;
    }
    p
}

/// Loads `len` elements of `inp` from `from` as keys into LDS with their
/// indices `first + c`, pads to `p` with `(MAX, u32::MAX)` and sorts them.
#[amdgpu_device]
#[inline(always)]
fn sort_tile_lds<T: SortKey>(inp: *const T, from: u64, len: u32, first: u32, descending: bool) {
    let pairs = Pairs::<T::Key>::at_start(SORT_TILE);
    let p = pow2_at_least(len);
    let mut c = workitem_id_x();
    while c < p {
        if c < len {
            let x = unsafe { load(inp, (from + c as u64) as usize) };
            pairs.store(c, x.sort_key(descending), first + c);
        } else {
            pairs.store(c, T::Key::MAX, u32::MAX);
        }
        c += workgroup_size_x();
    }
    barrier();
    bitonic_sort_lds(pairs, p);
}

/// The body of `sort_rows_*`: each row (`cols` ≤ [`SORT_TILE`]) sorted in
/// LDS; `out_vals[r, c] = inp[r, idx]` (unless `out_vals` is null: argsort)
/// and `out_idx[r, c] = idx` for the `c`-th pair.
#[amdgpu_device]
#[inline(always)]
pub fn sort_rows_body<T: SortKey>(
    out_vals: *mut T,
    out_idx: *mut u32,
    inp: *const T,
    rows: u64,
    cols: u64,
    descending: bool,
) {
    let pairs = Pairs::<T::Key>::at_start(SORT_TILE);
    let mut row = workgroup_id_x() as u64;
    while row < rows {
        let base = row * cols;
        sort_tile_lds(inp, base, cols as u32, 0, descending);
        let mut c = workitem_id_x();
        while (c as u64) < cols {
            let (_, i) = pairs.load(c);
            let at = (base + c as u64) as usize;
            unsafe {
                store(out_idx, at, i);
                if !out_vals.is_null() {
                    store(out_vals, at, load(inp, (base + i as u64) as usize));
                }
            }
            c += workgroup_size_x();
        }
        // The LDS is refilled for the next row.
        barrier();
        row += num_workgroups_x() as u64;
    }
}

/// The body of `sort_tiles_*`: every tile of [`SORT_TILE`] elements of every
/// row sorted into runs: `keys`/`idx` (rows × cols) hold the pairs.
#[amdgpu_device]
#[inline(always)]
pub fn sort_tiles_body<T: SortKey>(
    keys: *mut T::Key,
    idx: *mut u32,
    inp: *const T,
    rows: u64,
    cols: u64,
    descending: bool,
) {
    let pairs = Pairs::<T::Key>::at_start(SORT_TILE);
    let tile = SORT_TILE as u64;
    let per_row = cols.div_ceil(tile);
    let mut t = workgroup_id_x() as u64;
    while t < rows * per_row {
        let (row, first) = (t / per_row, (t % per_row) * tile);
        let len = (cols - first).min(tile) as u32;
        let base = row * cols + first;
        sort_tile_lds(inp, base, len, first as u32, descending);
        let mut c = workitem_id_x();
        while c < len {
            let (k, i) = pairs.load(c);
            unsafe {
                store(keys, (base + c as u64) as usize, k);
                store(idx, (base + c as u64) as usize, i);
            }
            c += workgroup_size_x();
        }
        barrier();
        t += num_workgroups_x() as u64;
    }
}

/// Outputs one workgroup of a merge pass writes: [`SORT_BLOCK`] workitems
/// times [`MERGE_ITEMS`] (a divisor of every merged run's width, which is
/// [`SORT_TILE`] times a power of two). Launches use [`SORT_BLOCK`].
#[amdgpu_device]
pub const MERGE_TILE: u32 = SORT_BLOCK * MERGE_ITEMS;

/// How many of the first `d` outputs of merging sorted `a` (length `a_len`)
/// and `b` (length `b_len`) come from `a`, with `a` first on equal keys: the
/// first `i` whose `a[i]` does not sort before `b[d - i - 1]` (merge path).
#[amdgpu_device]
#[inline(always)]
pub fn merge_corank<K: KeyWord>(
    d: u64,
    a_len: u64,
    b_len: u64,
    a: impl Fn(u64) -> K,
    b: impl Fn(u64) -> K,
) -> u64 {
    let (mut lo, mut hi) = (d.saturating_sub(b_len), d.min(a_len));
    while lo < hi {
        let i = (lo + hi) / 2;
        if a(i) <= b(d - i - 1) {
            lo = i + 1;
        } else {
            hi = i;
        }
    }
    lo
}

/// The body of `sort_merge_*`: merges each pair of sorted runs of `width`
/// (the last ones shorter) of every row into one run of `2 * width`, from
/// `in_keys`/`in_idx` into `out_keys`/`out_idx` or, in the last pass
/// (`last`), into the outputs: `out_idx` and `out_vals[r, c] = inp[r, idx]`
/// (unless `out_vals` is null). Equal keys take the first run's element
/// first (stable).
///
/// Each workgroup writes [`MERGE_TILE`] outputs: two workitems find where
/// its slices of the two runs start and end (a binary search each), the
/// group loads both slices into LDS (coalesced), each workitem finds its
/// [`MERGE_ITEMS`] outputs' start in LDS and merges them, and the group
/// writes the tile back through LDS (coalesced).
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn sort_merge_body<T: SortKey>(
    out_keys: *mut T::Key,
    out_idx: *mut u32,
    in_keys: *const T::Key,
    in_idx: *const u32,
    rows: u64,
    cols: u64,
    width: u64,
    out_vals: *mut T,
    inp: *const T,
    last: bool,
) {
    // MERGE_TILE keys, then as many indices, then the two slice bounds.
    let lkeys = lds::<T::Key>();
    let idx_at = MERGE_TILE * size_of::<T::Key>() as u32;
    let lidx = lds_at::<u32>(idx_at);
    let bounds = lds_at::<u32>(idx_at + MERGE_TILE * 4);
    let (tid, bs) = (workitem_id_x(), workgroup_size_x());
    let tile = (bs * MERGE_ITEMS) as u64;
    let per_row = cols.div_ceil(tile);
    let mut g = workgroup_id_x() as u64;
    while g < rows * per_row {
        let (row, p0) = (g / per_row, (g % per_row) * tile);
        let base = row * cols;
        let a0 = p0 / (2 * width) * (2 * width);
        let a_len = width.min(cols - a0);
        let b0 = a0 + a_len;
        let b_len = width.min(cols - b0);
        let a = |i: u64| unsafe { load(in_keys, (base + a0 + i) as usize) };
        let b = |j: u64| unsafe { load(in_keys, (base + b0 + j) as usize) };
        // This tile's outputs are diagonals d_start..d_end of the pair.
        let d_start = p0 - a0;
        let d_end = (d_start + tile).min(a_len + b_len);
        if tid < 2 {
            let d = if tid == 0 { d_start } else { d_end };
            bounds.store(tid, merge_corank(d, a_len, b_len, a, b) as u32);
        }
        barrier();
        let (i0, i1) = (bounds.load(0) as u64, bounds.load(1) as u64);
        let (j0, j1) = (d_start - i0, d_end - i1);
        let (la, lb) = ((i1 - i0) as u32, (j1 - j0) as u32);
        let mut e = tid;
        while e < la + lb {
            let from = if e < la {
                a0 + i0 + e as u64
            } else {
                b0 + j0 + (e - la) as u64
            };
            unsafe {
                lkeys.store(e, load(in_keys, (base + from) as usize));
                lidx.store(e, load(in_idx, (base + from) as usize));
            }
            e += bs;
        }
        barrier();
        // This workitem's outputs: diagonals d..d + MERGE_ITEMS of the slices.
        let d = Ord::min(tid * MERGE_ITEMS, la + lb);
        let n = Ord::min(la + lb - d, MERGE_ITEMS);
        let sa = |i: u64| lkeys.load(i as u32);
        let sb = |j: u64| lkeys.load(la + j as u32);
        let mut i = merge_corank(d as u64, la as u64, lb as u64, sa, sb) as u32;
        let mut j = d - i;
        let mut ks = [T::Key::MAX; MERGE_ITEMS as usize];
        let mut is = [0u32; MERGE_ITEMS as usize];
        let mut ka = if i < la { lkeys.load(i) } else { T::Key::MAX };
        let mut kb = if j < lb {
            lkeys.load(la + j)
        } else {
            T::Key::MAX
        };
        let mut k = 0;
        while k < MERGE_ITEMS as usize {
            if (k as u32) < n {
                let take_a = j >= lb || (i < la && ka <= kb);
                if take_a {
                    ks[k] = ka;
                    is[k] = lidx.load(i);
                    i += 1;
                    ka = if i < la { lkeys.load(i) } else { T::Key::MAX };
                } else {
                    ks[k] = kb;
                    is[k] = lidx.load(la + j);
                    j += 1;
                    kb = if j < lb {
                        lkeys.load(la + j)
                    } else {
                        T::Key::MAX
                    };
                }
            }
            k += 1;
        }
        // Every workitem has read its inputs: the tile goes back to LDS in
        // output order, then out coalesced.
        barrier();
        let mut k = 0;
        while k < MERGE_ITEMS as usize {
            if (k as u32) < n {
                lkeys.store(d + k as u32, ks[k]);
                lidx.store(d + k as u32, is[k]);
            }
            k += 1;
        }
        barrier();
        let mut e = tid;
        while e < la + lb {
            let at = (base + p0 + e as u64) as usize;
            let id = lidx.load(e);
            unsafe {
                store(out_idx, at, id);
                if !last {
                    store(out_keys, at, lkeys.load(e));
                } else if !out_vals.is_null() {
                    store(out_vals, at, load(inp, (base + id as u64) as usize));
                }
            }
            e += bs;
        }
        // The LDS is refilled for the next tile.
        barrier();
        g += num_workgroups_x() as u64;
    }
}

/// LDS bytes of a `sort_merge_*` launch with key type `K`.
#[amdgpu_device]
#[inline(always)]
pub fn merge_lds_bytes<K>() -> u32 {
    MERGE_TILE * (size_of::<K>() as u32 + 4) + 8
}

/// LDS layout of a top-k launch (byte offsets): the histogram, the
/// candidates' keys and indices, the block scan, per-wave counts, scalars.
#[amdgpu_device]
pub const TOPK_HIST_AT: u32 = 0;
/// See [`TOPK_HIST_AT`].
#[amdgpu_device]
pub const TOPK_KEYS_AT: u32 = BINS * 4;
/// See [`TOPK_HIST_AT`] (after [`TOPK_MAX`] u64 keys; the candidates are
/// [`Pairs`] at [`TOPK_KEYS_AT`]: packed words for 32-bit keys, else keys
/// there and indices here).
#[amdgpu_device]
pub const TOPK_IDX_AT: u32 = TOPK_KEYS_AT + TOPK_MAX * 8;
/// See [`TOPK_HIST_AT`] (one u32 per workitem, up to 1024).
#[amdgpu_device]
pub const TOPK_SCAN_AT: u32 = TOPK_IDX_AT + TOPK_MAX * 4;
/// See [`TOPK_HIST_AT`] (two u32 per wave, up to 32 waves).
#[amdgpu_device]
pub const TOPK_WAVES_AT: u32 = TOPK_SCAN_AT + 1024 * 4;
/// See [`TOPK_HIST_AT`] (three u32 scalars).
#[amdgpu_device]
pub const TOPK_SCALARS_AT: u32 = TOPK_WAVES_AT + 64 * 4;
/// LDS bytes of a top-k launch.
#[amdgpu_device]
pub const TOPK_LDS_BYTES: u32 = TOPK_SCALARS_AT + 3 * 4;

/// Exclusive prefix sum of `v` over the workgroup (Hillis-Steele in LDS at
/// [`TOPK_SCAN_AT`]); every workitem calls it.
#[amdgpu_device]
#[inline(always)]
fn block_exclusive_scan(v: u32) -> u32 {
    let scan = lds_at::<u32>(TOPK_SCAN_AT);
    let tid = workitem_id_x();
    scan.store(tid, v);
    barrier();
    let mut offset = 1;
    while offset < workgroup_size_x() {
        let add = if tid >= offset {
            scan.load(tid - offset)
        } else {
            0
        };
        barrier();
        scan.store(tid, scan.load(tid) + add);
        barrier();
        offset *= 2;
    }
    let inclusive = scan.load(tid);
    barrier();
    inclusive - v
}

/// The body of `topk_*`: each row of `row_len` is cut into `nseg` (=
/// `max(1, row_len / seg)`, from the host) segments of `seg` (the last
/// takes the remainder; with segments, `rows * nseg < 2^32`), and for
/// each segment the first `k` (1 ≤ k ≤ [`TOPK_MAX`], at most a segment)
/// elements in sorted order (`descending`: the largest) are written, values
/// and row indices, to `[rows, segments, k]`. With `seg >= row_len`, the
/// top k of each row: the same result as sorting it and keeping `k`, ties
/// included. Segments let many workgroups share a long row; the op then
/// takes the top k of the segments' winners (in segment order, so ties still
/// go to the lowest index). Workgroup size: a power of two, 64 to 1024.
#[amdgpu_device]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub fn topk_body<T: SortKey>(
    out_vals: *mut T,
    out_idx: *mut u32,
    inp: *const T,
    rows: u64,
    row_len: u64,
    seg: u64,
    nseg: u32,
    k: u32,
    descending: bool,
) {
    let nseg = nseg as u64;
    let hist = lds_at::<u32>(TOPK_HIST_AT);
    let cand = Pairs::<T::Key>::at(TOPK_KEYS_AT, TOPK_MAX);
    let waves = lds_at::<u32>(TOPK_WAVES_AT);
    let scalars = lds_at::<u32>(TOPK_SCALARS_AT);
    let bs = workgroup_size_x();
    let tid = workitem_id_x();
    let mut unit = workgroup_id_x() as u64;
    while unit < rows * nseg {
        // 32-bit division (a uniform 64-bit one spilled SGPRs on gfx90a):
        // with segments, rows * segments < 2^32 (a segment is 8192
        // elements), and without them there is nothing to divide.
        let (row, s) = if nseg == 1 {
            (unit, 0)
        } else {
            let (u, n) = (unit as u32, nseg as u32);
            ((u / n) as u64, (u % n) as u64)
        };
        let start = s * seg;
        // In-segment indices fit 32 bits (rows are at most u32::MAX long).
        let cols = (if s + 1 == nseg { row_len - start } else { seg }) as u32;
        let base = row * row_len + start;
        let key = |c: u32| unsafe { load(inp, (base + c as u64) as usize) }.sort_key(descending);
        // Radix select: the k-th smallest key, digit by digit from the top.
        let (mut prefix, mut mask) = (T::Key::ZERO, T::Key::ZERO);
        let mut remaining = k;
        let (mut limit, mut count) = (T::Key::ZERO, 0u32);
        let mut shift = T::Key::BITS;
        while shift > 0 {
            let bits = if shift < DIGIT_BITS {
                shift
            } else {
                DIGIT_BITS
            };
            shift -= bits;
            let mut b = tid;
            while b < BINS {
                hist.store(b, 0);
                b += bs;
            }
            barrier();
            let mut c = tid;
            while c < cols {
                let kc = key(c);
                if kc.matches(mask, prefix) {
                    hist.atomic_add(kc.digit(shift, bits), 1);
                }
                c += bs;
            }
            barrier();
            // Each workitem owns BINS / bs consecutive bins; the one whose
            // range holds the `remaining`-th key finds its bin.
            let per = BINS / bs;
            let mut own = 0;
            let mut j = 0;
            while j < per {
                own += hist.load(tid * per + j);
                j += 1;
            }
            let before = block_exclusive_scan(own);
            if before < remaining && remaining <= before + own {
                let mut cum = before;
                let mut j = 0;
                while j < per {
                    let h = hist.load(tid * per + j);
                    if cum + h >= remaining {
                        scalars.store(0, tid * per + j);
                        scalars.store(1, cum);
                        scalars.store(2, h);
                        break;
                    }
                    cum += h;
                    j += 1;
                }
            }
            barrier();
            let (bin, below, in_bin) = (scalars.load(0), scalars.load(1), scalars.load(2));
            // The histogram and scalars are reused by the next pass.
            barrier();
            // Few enough keys up to this bin: take them all and sort them
            // (usually after the first pass: the k-th key's bin holds about
            // cols / BINS keys).
            let upto = k - remaining + below + in_bin;
            if shift > 0 && upto <= TOPK_MAX && bin + 1 < (1 << bits) {
                limit = prefix.with_digit(bin + 1, shift);
                count = upto;
                break;
            }
            prefix = prefix.with_digit(bin, shift);
            mask = mask.with_digit((1 << bits) - 1, shift);
            remaining -= below;
        }
        // Either every key below `limit` (`count` of them, the k first
        // among them), or: `prefix` is the k-th key, `k - remaining` keys
        // lie below it and the first `remaining` equal to it (by index)
        // complete the k.
        let (thr, less, need) = if count > 0 {
            (limit, count, 0)
        } else {
            (prefix, k - remaining, remaining)
        };
        let ncand = less + need;
        let (mut less_seen, mut ties_seen) = (0u32, 0u32);
        let lane = lane_id();
        let below_me = if lane == 0 {
            0
        } else {
            u64::MAX >> (64 - lane)
        };
        let mut c0 = 0u32;
        while c0 < cols && (less_seen < less || ties_seen < need) {
            let c = c0 + tid;
            let kc = if c < cols { key(c) } else { T::Key::MAX };
            let is_less = c < cols && kc < thr;
            let is_tie = c < cols && kc == thr;
            let (lb, tb) = (wave_ballot(is_less), wave_ballot(is_tie));
            if lane == 0 {
                waves.store(2 * wave_id(), lb.count_ones());
                waves.store(2 * wave_id() + 1, tb.count_ones());
            }
            barrier();
            let (mut lbase, mut tbase, mut ltot, mut ttot) = (0, 0, 0, 0);
            let mut w = 0;
            while w < num_waves() {
                let (l, t) = (waves.load(2 * w), waves.load(2 * w + 1));
                if w < wave_id() {
                    lbase += l;
                    tbase += t;
                }
                ltot += l;
                ttot += t;
                w += 1;
            }
            if is_less {
                let at = less_seen + lbase + (lb & below_me).count_ones();
                cand.store(at, kc, c);
            }
            if is_tie {
                let r = ties_seen + tbase + (tb & below_me).count_ones();
                if r < need {
                    cand.store(less + r, kc, c);
                }
            }
            less_seen += ltot;
            ties_seen += ttot;
            // The per-wave counts are rewritten by the next tile.
            barrier();
            c0 += bs;
        }
        let p = pow2_at_least(ncand);
        let mut c = ncand + tid;
        while c < p {
            cand.store(c, T::Key::MAX, u32::MAX);
            c += bs;
        }
        barrier();
        // At most TOPK_MAX candidates: all in LDS (the register network
        // pushed this kernel past the SGPR budget of gfx9).
        bitonic_sort_pairs_only(cand, p);
        barrier();
        let mut c = tid;
        while c < k {
            let (_, i) = cand.load(c);
            let at = (unit * k as u64 + c as u64) as usize;
            unsafe {
                store(out_idx, at, start as u32 + i);
                store(out_vals, at, load(inp, (base + i as u64) as usize));
            }
            c += bs;
        }
        barrier();
        unit += num_workgroups_x() as u64;
    }
}

/// `sort_rows_*` parameters: `(out_vals, out_idx, inp, rows, cols, descending)`.
#[cfg(not(ferrocm_device))]
pub type SortRowsArgs<T> = (*mut T, *mut u32, *const T, u64, u64, u32);

/// `sort_tiles_*` parameters: `(keys, idx, inp, rows, cols, descending)`.
#[cfg(not(ferrocm_device))]
pub type SortTilesArgs<T> = (*mut <T as SortKey>::Key, *mut u32, *const T, u64, u64, u32);

/// `sort_merge_*` parameters: `(out_keys, out_idx, in_keys, in_idx, rows,
/// cols, width, out_vals, inp, last)`.
#[cfg(not(ferrocm_device))]
pub type SortMergeArgs<T> = (
    *mut <T as SortKey>::Key,
    *mut u32,
    *const <T as SortKey>::Key,
    *const u32,
    u64,
    u64,
    u64,
    *mut T,
    *const T,
    u32,
);

/// `topk_*` parameters: `(out_vals, out_idx, inp, rows, row_len, seg,
/// nseg, k, descending)`.
#[cfg(not(ferrocm_device))]
pub type TopkArgs<T> = (*mut T, *mut u32, *const T, u64, u64, u64, u32, u32, u32);

#[cfg(not(ferrocm_device))]
use crate::host::KernelRef;

/// The sort and top-k kernels of an element type (host side).
#[cfg(not(ferrocm_device))]
pub trait SortKernels: SortKey<Key: Ord + Send + Sync + bytemuck::Pod> {
    /// `sort_rows_{T}`.
    const SORT_ROWS: KernelRef<SortRowsArgs<Self>>;
    /// `sort_tiles_{T}`.
    const SORT_TILES: KernelRef<SortTilesArgs<Self>>;
    /// `sort_merge_{T}`.
    const SORT_MERGE: KernelRef<SortMergeArgs<Self>>;
    /// `topk_{T}`.
    const TOPK: KernelRef<TopkArgs<Self>>;
}

macro_rules! sort_kernels {
    ($($t:ty, $k:ty => $rows:ident, $tiles:ident, $merge:ident, $topk:ident;)*) => {
        kernels! { $(
            fn $rows(out_vals: *mut $t, out_idx: *mut u32, inp: *const $t, rows: u64, cols: u64, descending: u32) {
                sort_rows_body::<$t>(out_vals, out_idx, inp, rows, cols, descending != 0)
            }
            fn $tiles(keys: *mut $k, idx: *mut u32, inp: *const $t, rows: u64, cols: u64, descending: u32) {
                sort_tiles_body::<$t>(keys, idx, inp, rows, cols, descending != 0)
            }
            fn $merge(out_keys: *mut $k, out_idx: *mut u32, in_keys: *const $k, in_idx: *const u32, rows: u64, cols: u64, width: u64, out_vals: *mut $t, inp: *const $t, last: u32) {
                sort_merge_body::<$t>(out_keys, out_idx, in_keys, in_idx, rows, cols, width, out_vals, inp, last != 0)
            }
            fn $topk(out_vals: *mut $t, out_idx: *mut u32, inp: *const $t, rows: u64, row_len: u64, seg: u64, nseg: u32, k: u32, descending: u32) {
                topk_body::<$t>(out_vals, out_idx, inp, rows, row_len, seg, nseg, k, descending != 0)
            }
        )* }

        #[cfg(not(ferrocm_device))]
        const _: () = { $(
            impl SortKernels for $t {
                const SORT_ROWS: KernelRef<SortRowsArgs<Self>> = KernelRef::of::<$rows>();
                const SORT_TILES: KernelRef<SortTilesArgs<Self>> = KernelRef::of::<$tiles>();
                const SORT_MERGE: KernelRef<SortMergeArgs<Self>> = KernelRef::of::<$merge>();
                const TOPK: KernelRef<TopkArgs<Self>> = KernelRef::of::<$topk>();
            }
        )* };
    };
}

sort_kernels! {
    f32, u32 => sort_rows_f32, sort_tiles_f32, sort_merge_f32, topk_f32;
    F16, u32 => sort_rows_f16, sort_tiles_f16, sort_merge_f16, topk_f16;
    Bf16, u32 => sort_rows_bf16, sort_tiles_bf16, sort_merge_bf16, topk_bf16;
    u8, u32 => sort_rows_u8, sort_tiles_u8, sort_merge_u8, topk_u8;
    u32, u32 => sort_rows_u32, sort_tiles_u32, sort_merge_u32, topk_u32;
    i64, u64 => sort_rows_i64, sort_tiles_i64, sort_merge_i64, topk_i64;
}
