//! [`QuantFormat`]: GGML's block formats by name and GGUF type id, with the
//! traits table every quantized op reads (block size, bytes, the activation
//! format of its dot product).

use ferrocm_kernels::quant::blocks::*;

/// A GGML block-quantized format.
///
/// ```
/// use ferrocm_ops::QuantFormat;
/// let f: QuantFormat = "q4_k".parse().unwrap();
/// assert_eq!(f, QuantFormat::Q4K);
/// assert_eq!(f.to_string(), "q4_K");           // GGML's spelling
/// assert_eq!(f.ggml_type(), 12);                // GGUF's type id
/// assert_eq!((f.block_elems(), f.block_bytes()), (256, 144));
/// assert_eq!(f.bytes_for(4096), Some(16 * 144));
/// assert_eq!(f.bytes_for(100), None);          // not whole blocks
/// assert_eq!(QuantFormat::from_ggml_type(8), Some(QuantFormat::Q8_0));
/// assert_eq!(f.dot_format(), QuantFormat::Q8K);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum QuantFormat {
    /// 4-bit, one f16 scale per 32 (4.5 bits per weight).
    Q4_0,
    /// 4-bit with a minimum, per 32 (5.0 bpw).
    Q4_1,
    /// 5-bit, per 32 (5.5 bpw).
    Q5_0,
    /// 5-bit with a minimum, per 32 (6.0 bpw).
    Q5_1,
    /// 8-bit, per 32 (8.5 bpw).
    Q8_0,
    /// 8-bit with the scaled sum, per 32 (9.0 bpw): Q4_1/Q5_1's activations.
    Q8_1,
    /// K-quant, 2-bit codes with 4-bit scales and minimums per 16 (2.625 bpw).
    Q2K,
    /// K-quant, 3-bit codes with 6-bit scales per 16 (3.4375 bpw).
    Q3K,
    /// K-quant, 4-bit codes with 6-bit scales and minimums per 32 (4.5 bpw).
    Q4K,
    /// K-quant, 5-bit codes with 6-bit scales and minimums per 32 (5.5 bpw).
    Q5K,
    /// K-quant, 6-bit codes with 8-bit scales per 16 (6.5625 bpw).
    Q6K,
    /// 8-bit with an f32 scale per 256 and group sums: the K-quants' activations.
    Q8K,
    /// 4-bit codes into a non-linear table, per 32 (4.5 bpw).
    Iq4Nl,
    /// IQ4_NL's table with 6-bit scales per 32 in blocks of 256 (4.25 bpw).
    Iq4Xs,
    /// OCP MXFP4: FP4 (E2M1) codes with a power-of-two scale per 32 (4.25 bpw).
    Mxfp4,
}

/// One row of the traits table.
struct Traits {
    name: &'static str,
    ggml_type: u32,
    block_elems: usize,
    block_bytes: usize,
    dot: QuantFormat,
}

const fn traits<B: QuantBlock>(name: &'static str, dot: QuantFormat) -> Traits {
    Traits {
        name,
        ggml_type: B::GGML_TYPE,
        block_elems: B::ELEMS,
        block_bytes: size_of::<B>(),
        dot,
    }
}

impl QuantFormat {
    /// Every format, in GGUF type-id order.
    pub const ALL: [QuantFormat; 15] = [
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::Q8_0,
        Self::Q8_1,
        Self::Q2K,
        Self::Q3K,
        Self::Q4K,
        Self::Q5K,
        Self::Q6K,
        Self::Q8K,
        Self::Iq4Nl,
        Self::Iq4Xs,
        Self::Mxfp4,
    ];

    const fn traits(self) -> Traits {
        use QuantFormat::*;
        // The activation formats follow ggml's CPU `vec_dot_type`.
        match self {
            Q4_0 => traits::<BlockQ4_0>("q4_0", Q8_0),
            Q4_1 => traits::<BlockQ4_1>("q4_1", Q8_1),
            Q5_0 => traits::<BlockQ5_0>("q5_0", Q8_0),
            Q5_1 => traits::<BlockQ5_1>("q5_1", Q8_1),
            Q8_0 => traits::<BlockQ8_0>("q8_0", Q8_0),
            Q8_1 => traits::<BlockQ8_1>("q8_1", Q8_1),
            Q2K => traits::<BlockQ2K>("q2_K", Q8K),
            Q3K => traits::<BlockQ3K>("q3_K", Q8K),
            Q4K => traits::<BlockQ4K>("q4_K", Q8K),
            Q5K => traits::<BlockQ5K>("q5_K", Q8K),
            Q6K => traits::<BlockQ6K>("q6_K", Q8K),
            Q8K => traits::<BlockQ8K>("q8_K", Q8K),
            Iq4Nl => traits::<BlockIq4Nl>("iq4_nl", Q8_0),
            Iq4Xs => traits::<BlockIq4Xs>("iq4_xs", Q8K),
            Mxfp4 => traits::<BlockMxfp4>("mxfp4", Q8_0),
        }
    }

    /// GGML's name (`q4_0`, `q4_K`, `iq4_xs`, `mxfp4`).
    pub const fn name(self) -> &'static str {
        self.traits().name
    }

    /// GGML's type id, as GGUF's tensor infos store it.
    pub const fn ggml_type(self) -> u32 {
        self.traits().ggml_type
    }

    /// The format of GGML type id `id`, if it is one of these.
    pub fn from_ggml_type(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.ggml_type() == id)
    }

    /// Logical elements per block (32, or 256 for the K-quants, IQ4_XS, Q8_K).
    pub const fn block_elems(self) -> usize {
        self.traits().block_elems
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        self.traits().block_bytes
    }

    /// The format the activations take in this format's integer dot
    /// product (ggml's `vec_dot_type`): Q8_0, Q8_1 or Q8_K.
    pub const fn dot_format(self) -> Self {
        self.traits().dot
    }

    /// Bytes holding `elems` elements, if they are a whole number of blocks
    /// and the size fits a `usize`.
    pub fn bytes_for(self, elems: usize) -> Option<usize> {
        if !elems.is_multiple_of(self.block_elems()) {
            return None;
        }
        (elems / self.block_elems()).checked_mul(self.block_bytes())
    }
}

impl std::fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for QuantFormat {
    type Err = crate::Error;

    /// GGML's name in any case (`q4_k`, `Q4_K`, `IQ4_XS`).
    fn from_str(s: &str) -> crate::Result<Self> {
        Self::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(s))
            .ok_or_else(|| crate::Error::BadParameter {
                op: "QuantFormat::from_str",
                what: format!(
                    "{s:?} is not a quantized format (one of {})",
                    Self::ALL.map(|f| f.name()).join(", ")
                ),
            })
    }
}

/// Runs `$body` with `$b` the block type of the format `$f`.
macro_rules! with_block {
    ($f:expr, $b:ident => $body:expr) => {{
        use ferrocm_kernels::quant::blocks::*;
        use $crate::quant::QuantFormat as F;
        match $f {
            F::Q4_0 => {
                type $b = BlockQ4_0;
                $body
            }
            F::Q4_1 => {
                type $b = BlockQ4_1;
                $body
            }
            F::Q5_0 => {
                type $b = BlockQ5_0;
                $body
            }
            F::Q5_1 => {
                type $b = BlockQ5_1;
                $body
            }
            F::Q8_0 => {
                type $b = BlockQ8_0;
                $body
            }
            F::Q8_1 => {
                type $b = BlockQ8_1;
                $body
            }
            F::Q2K => {
                type $b = BlockQ2K;
                $body
            }
            F::Q3K => {
                type $b = BlockQ3K;
                $body
            }
            F::Q4K => {
                type $b = BlockQ4K;
                $body
            }
            F::Q5K => {
                type $b = BlockQ5K;
                $body
            }
            F::Q6K => {
                type $b = BlockQ6K;
                $body
            }
            F::Q8K => {
                type $b = BlockQ8K;
                $body
            }
            F::Iq4Nl => {
                type $b = BlockIq4Nl;
                $body
            }
            F::Iq4Xs => {
                type $b = BlockIq4Xs;
                $body
            }
            F::Mxfp4 => {
                type $b = BlockMxfp4;
                $body
            }
        }
    }};
}
pub(crate) use with_block;
