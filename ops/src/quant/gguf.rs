//! GGUF, the file format of llama.cpp's models (versions 2 and 3): a reader
//! that memory-maps the file and loads each tensor onto a device as a
//! [`QTensor`] or a dense [`DynTensor`] straight from the mapping, and a
//! writer. The format as ggml/src/gguf.cpp reads it: a header (magic, version,
//! tensor count, metadata count), typed metadata key-value pairs (nested
//! arrays included), tensor infos (name, dims innermost first, GGML type,
//! offset), then the tensor data from the first multiple of
//! `general.alignment` (default 32), each tensor at an aligned offset.
//!
//! Every count, size and offset is checked before it is used: a truncated or
//! corrupt file is an [`Error::Gguf`] naming what is wrong and the byte
//! offset, never a panic or a read out of bounds.
//!
//! ```
//! use ferrocm_ops::quant::gguf::{Gguf, GgufValue, GgufWriter};
//! use ferrocm_ops::{Device, QTensor, QuantFormat, Tensor};
//! let w = QTensor::quantize(&Tensor::<f32>::ones(&[2, 32], &Device::Cpu)?, QuantFormat::Q8_0)?;
//! let norm = Tensor::from_slice(&[1.0f32, 2.0], &[2], &Device::Cpu)?;
//! let mut file = GgufWriter::new();
//! file.metadata("general.architecture", GgufValue::String("llama".into()));
//! file.qtensor("blk.0.attn_q.weight", &w)?;
//! file.tensor("blk.0.attn_norm.weight", &norm.to_dyn())?;
//! let bytes = file.to_bytes()?;
//! let g = Gguf::from_bytes(bytes)?;
//! assert_eq!(g.get("general.architecture").and_then(|v| v.as_str()), Some("llama"));
//! let q = g.qtensor("blk.0.attn_q.weight", &Device::Cpu)?;
//! assert_eq!((q.format(), q.shape()), (QuantFormat::Q8_0, &[2usize, 32][..]));
//! assert_eq!(g.tensor("blk.0.attn_norm.weight", &Device::Cpu)?.to_f64_vec()?, vec![1.0, 2.0]);
//! # Ok::<(), ferrocm_ops::Error>(())
//! ```

use crate::core::layout::checked_count;
use crate::quant::{QTensor, QuantFormat};
use crate::{DType, Device, DynTensor, Error, Result, Tensor};
use std::collections::HashMap;
use std::path::Path;

/// "GGUF" as a little-endian u32.
const MAGIC: &[u8; 4] = b"GGUF";
/// The alignment of the data section and of each tensor when the file does
/// not say (`general.alignment`).
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dims a GGUF tensor has (GGML_MAX_DIMS).
pub const MAX_DIMS: usize = 4;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    /// u8.
    U8(u8),
    /// i8.
    I8(i8),
    /// u16.
    U16(u16),
    /// i16.
    I16(i16),
    /// u32.
    U32(u32),
    /// i32.
    I32(i32),
    /// f32.
    F32(f32),
    /// bool (one byte, 0 or 1).
    Bool(bool),
    /// UTF-8 string.
    String(String),
    /// An array of values of one type (`item_type`: the GGUF value type id,
    /// kept so an empty array is written back as it was read).
    Array {
        /// GGUF's value type id of the items.
        item_type: u32,
        /// The items.
        items: Vec<GgufValue>,
    },
    /// u64.
    U64(u64),
    /// i64.
    I64(i64),
    /// f64.
    F64(f64),
}

impl GgufValue {
    /// GGUF's type id of this value.
    pub fn type_id(&self) -> u32 {
        match self {
            GgufValue::U8(_) => 0,
            GgufValue::I8(_) => 1,
            GgufValue::U16(_) => 2,
            GgufValue::I16(_) => 3,
            GgufValue::U32(_) => 4,
            GgufValue::I32(_) => 5,
            GgufValue::F32(_) => 6,
            GgufValue::Bool(_) => 7,
            GgufValue::String(_) => 8,
            GgufValue::Array { .. } => 9,
            GgufValue::U64(_) => 10,
            GgufValue::I64(_) => 11,
            GgufValue::F64(_) => 12,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// An integer value of any width and sign, if it is one (bool is not).
    pub fn as_i128(&self) -> Option<i128> {
        Some(match *self {
            GgufValue::U8(v) => v as i128,
            GgufValue::I8(v) => v as i128,
            GgufValue::U16(v) => v as i128,
            GgufValue::I16(v) => v as i128,
            GgufValue::U32(v) => v as i128,
            GgufValue::I32(v) => v as i128,
            GgufValue::U64(v) => v as i128,
            GgufValue::I64(v) => v as i128,
            _ => return None,
        })
    }

    /// A float value (f32 or f64), if it is one.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v as f64),
            GgufValue::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The items, if this is an array.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array { items, .. } => Some(items),
            _ => None,
        }
    }
}

impl std::fmt::Display for GgufValue {
    /// Arrays longer than 8 items are summarised (`[a, b, c, ... 32000 items]`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GgufValue::U8(v) => write!(f, "{v}"),
            GgufValue::I8(v) => write!(f, "{v}"),
            GgufValue::U16(v) => write!(f, "{v}"),
            GgufValue::I16(v) => write!(f, "{v}"),
            GgufValue::U32(v) => write!(f, "{v}"),
            GgufValue::I32(v) => write!(f, "{v}"),
            GgufValue::F32(v) => write!(f, "{v}"),
            GgufValue::Bool(v) => write!(f, "{v}"),
            GgufValue::String(s) => write!(f, "{s:?}"),
            GgufValue::U64(v) => write!(f, "{v}"),
            GgufValue::I64(v) => write!(f, "{v}"),
            GgufValue::F64(v) => write!(f, "{v}"),
            GgufValue::Array { items, .. } => {
                f.write_str("[")?;
                for (i, v) in items.iter().take(8).enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{v}")?;
                }
                if items.len() > 8 {
                    write!(f, ", ... {} items", items.len())?;
                }
                f.write_str("]")
            }
        }
    }
}

/// A tensor's element type in a GGUF file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// Dense elements of a ferrocm dtype (GGML's F32, F16, BF16, I64).
    Dense(DType),
    /// Blocks of a format ferrocm computes with.
    Quant(QuantFormat),
    /// A GGML type ferrocm reads and writes as bytes but does not compute
    /// with (I8, I16, I32, F64, the IQ1-IQ3 and ternary formats, NVFP4, ...).
    Other(u32),
}

/// The GGML types ferrocm can size but does not compute with: (id, name,
/// block elements, block bytes), from ggml.h and ggml-common.h.
const OTHER_TYPES: [(u32, &str, usize, usize); 16] = [
    (16, "iq2_xxs", 256, 66),
    (17, "iq2_xs", 256, 74),
    (18, "iq3_xxs", 256, 98),
    (19, "iq1_s", 256, 50),
    (21, "iq3_s", 256, 110),
    (22, "iq2_s", 256, 82),
    (24, "i8", 1, 1),
    (25, "i16", 1, 2),
    (26, "i32", 1, 4),
    (28, "f64", 1, 8),
    (29, "iq1_m", 256, 56),
    (34, "tq1_0", 256, 54),
    (35, "tq2_0", 256, 66),
    (40, "nvfp4", 64, 36),
    (41, "q1_0", 128, 18),
    (42, "q2_0", 64, 18),
];

impl GgmlType {
    /// The type of GGML type id `id`, if GGML defines it.
    pub fn from_id(id: u32) -> Option<Self> {
        Some(match id {
            0 => GgmlType::Dense(DType::F32),
            1 => GgmlType::Dense(DType::F16),
            30 => GgmlType::Dense(DType::BF16),
            27 => GgmlType::Dense(DType::I64),
            _ => match QuantFormat::from_ggml_type(id) {
                Some(f) => GgmlType::Quant(f),
                None => {
                    OTHER_TYPES.iter().find(|t| t.0 == id)?;
                    GgmlType::Other(id)
                }
            },
        })
    }

    /// GGML's type id.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::Dense(DType::F32) => 0,
            GgmlType::Dense(DType::F16) => 1,
            GgmlType::Dense(DType::BF16) => 30,
            GgmlType::Dense(DType::I64) => 27,
            // No GGML type: refused by the writer before it asks.
            GgmlType::Dense(_) => u32::MAX,
            GgmlType::Quant(f) => f.ggml_type(),
            GgmlType::Other(id) => id,
        }
    }

    /// (elements per block, bytes per block).
    fn block(self) -> (usize, usize) {
        match self {
            GgmlType::Dense(d) => (1, d.size_in_bytes()),
            GgmlType::Quant(f) => (f.block_elems(), f.block_bytes()),
            GgmlType::Other(id) => OTHER_TYPES
                .iter()
                .find(|t| t.0 == id)
                .map_or((1, 0), |t| (t.2, t.3)),
        }
    }

    /// Bytes of `elems` elements, if they are whole blocks and fit.
    pub fn bytes_for(self, elems: u64) -> Option<u64> {
        let (be, bb) = self.block();
        if !elems.is_multiple_of(be as u64) {
            return None;
        }
        (elems / be as u64).checked_mul(bb as u64)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GgmlType::Dense(d) => write!(f, "{d}"),
            GgmlType::Quant(q) => write!(f, "{q}"),
            GgmlType::Other(id) => {
                let name = OTHER_TYPES.iter().find(|t| t.0 == *id).map_or("?", |t| t.1);
                write!(f, "{name}")
            }
        }
    }
}

/// One tensor's entry in a GGUF file.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensorInfo {
    /// Name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Row-major shape: GGUF's dims reversed (GGUF lists the innermost, a
    /// row's length, first; a weight `[out, in]` is stored as `[in, out]`).
    pub shape: Vec<usize>,
    /// Element type.
    pub ggml_type: GgmlType,
    /// Byte offset of the data from the start of the data section.
    pub offset: u64,
    /// Bytes of data.
    pub bytes: u64,
}

/// The bytes of a file: memory-mapped, or owned.
enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// A parsed GGUF file: its metadata in file order, its tensor infos, and
/// the bytes (memory-mapped when opened from a path), from which tensors
/// load onto a device without a second read of the file.
pub struct Gguf {
    version: u32,
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<GgufTensorInfo>,
    by_name: HashMap<String, usize>,
    alignment: u64,
    data_start: u64,
    bytes: Bytes,
}

impl std::fmt::Debug for Gguf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Gguf(v{}, {} metadata, {} tensors)",
            self.version,
            self.metadata.len(),
            self.tensors.len()
        )
    }
}

/// A bounds-checked little-endian reader over the file's bytes.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

fn corrupt(what: impl Into<String>, offset: usize) -> Error {
    Error::Gguf {
        what: what.into(),
        offset: offset as u64,
    }
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len());
        match end {
            Some(end) => {
                let s = &self.b[self.at..end];
                self.at = end;
                Ok(s)
            }
            None => Err(corrupt(
                format!(
                    "truncated: {what} needs {n} bytes, {} remain",
                    self.b.len() - self.at
                ),
                self.at,
            )),
        }
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        Ok(self.take(N, what)?.try_into().expect("N bytes"))
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let at = self.at;
        let n = self.u64(what)?;
        let n =
            usize::try_from(n).map_err(|_| corrupt(format!("{what}: length {n} too large"), at))?;
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| corrupt(format!("{what} is not UTF-8 ({e})"), at + 8))
    }
    /// A value of type `ty`; arrays nest at most `depth` more levels.
    fn value(&mut self, ty: u32, what: &str, depth: u32) -> Result<GgufValue> {
        let at = self.at;
        Ok(match ty {
            0 => GgufValue::U8(self.array::<1>(what)?[0]),
            1 => GgufValue::I8(self.array::<1>(what)?[0] as i8),
            2 => GgufValue::U16(u16::from_le_bytes(self.array(what)?)),
            3 => GgufValue::I16(i16::from_le_bytes(self.array(what)?)),
            4 => GgufValue::U32(self.u32(what)?),
            5 => GgufValue::I32(i32::from_le_bytes(self.array(what)?)),
            6 => GgufValue::F32(f32::from_le_bytes(self.array(what)?)),
            7 => match self.array::<1>(what)?[0] {
                0 => GgufValue::Bool(false),
                1 => GgufValue::Bool(true),
                b => {
                    return Err(corrupt(
                        format!("{what}: bool byte {b} is neither 0 nor 1"),
                        at,
                    ));
                }
            },
            8 => GgufValue::String(self.string(what)?),
            9 => {
                if depth == 0 {
                    return Err(corrupt(format!("{what}: arrays nested too deep"), at));
                }
                let item_type = self.u32(what)?;
                let n = self.u64(what)?;
                // Every item takes at least one byte: a count past the
                // remaining bytes is corrupt before anything is allocated.
                if n > (self.b.len() - self.at) as u64 {
                    return Err(corrupt(
                        format!(
                            "{what}: array of {n} items, only {} bytes remain",
                            self.b.len() - self.at
                        ),
                        at,
                    ));
                }
                if item_type > 12 {
                    return Err(corrupt(
                        format!("{what}: unknown array item type {item_type}"),
                        at,
                    ));
                }
                let mut items = Vec::with_capacity((n as usize).min(1 << 16));
                for _ in 0..n {
                    items.push(self.value(item_type, what, depth - 1)?);
                }
                GgufValue::Array { item_type, items }
            }
            10 => GgufValue::U64(self.u64(what)?),
            11 => GgufValue::I64(i64::from_le_bytes(self.array(what)?)),
            12 => GgufValue::F64(f64::from_le_bytes(self.array(what)?)),
            t => {
                return Err(corrupt(
                    format!("{what}: unknown value type {t}"),
                    at.saturating_sub(4),
                ));
            }
        })
    }
}

impl Gguf {
    /// Opens and parses the file at `path`, memory-mapped (tensor data is
    /// read from the mapping when a tensor is loaded).
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be opened or mapped;
    /// [`Error::Gguf`] when it is not a valid GGUF file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |e: std::io::Error| Error::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the mapping is read-only; a file changed underneath while
        // mapped is the caller's concern, as for every mmap-based loader.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Self::parse(Bytes::Mapped(map))
    }

    /// Parses a GGUF file held in memory.
    ///
    /// # Errors
    /// [`Error::Gguf`] when the bytes are not a valid GGUF file.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        Self::parse(Bytes::Owned(bytes))
    }

    fn parse(bytes: Bytes) -> Result<Self> {
        let mut r = Reader { b: &bytes, at: 0 };
        if r.take(4, "magic")? != MAGIC {
            return Err(corrupt("bad magic (not a GGUF file)", 0));
        }
        let version = r.u32("version")?;
        if version != 2 && version != 3 {
            return Err(corrupt(
                format!("version {version} (ferrocm reads 2 and 3)"),
                4,
            ));
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;
        let left = (r.b.len() - r.at) as u64;
        // A key-value pair takes at least 13 bytes, a tensor info 24.
        if n_kv > left / 13 {
            return Err(corrupt(
                format!("metadata count {n_kv} exceeds what {left} bytes can hold"),
                16,
            ));
        }
        if n_tensors > left / 24 {
            return Err(corrupt(
                format!("tensor count {n_tensors} exceeds what {left} bytes can hold"),
                8,
            ));
        }
        let mut metadata: Vec<(String, GgufValue)> =
            Vec::with_capacity((n_kv as usize).min(1 << 16));
        let mut keys = HashMap::new();
        for i in 0..n_kv {
            let at = r.at;
            let key = r.string(&format!("metadata key {i}"))?;
            let ty = r.u32(&format!("type of {key:?}"))?;
            let value = r.value(ty, &format!("value of {key:?}"), 8)?;
            if keys.insert(key.clone(), metadata.len()).is_some() {
                return Err(corrupt(format!("duplicate metadata key {key:?}"), at));
            }
            metadata.push((key, value));
        }
        let alignment = match keys.get("general.alignment").map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(GgufValue::U32(a)) if a.is_power_of_two() => *a as u64,
            Some(v) => {
                return Err(corrupt(
                    format!("general.alignment {v} is not a power of two u32"),
                    0,
                ));
            }
        };
        let mut tensors = Vec::with_capacity((n_tensors as usize).min(1 << 16));
        let mut by_name = HashMap::new();
        for i in 0..n_tensors {
            let at = r.at;
            let name = r.string(&format!("tensor {i} name"))?;
            let dims_at = r.at;
            let n_dims = r.u32(&format!("dims of {name:?}"))? as usize;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(corrupt(
                    format!("tensor {name:?} has {n_dims} dims (1 to {MAX_DIMS})"),
                    dims_at,
                ));
            }
            let mut ne = Vec::with_capacity(n_dims);
            for _ in 0..n_dims {
                let d = r.u64(&format!("dims of {name:?}"))?;
                ne.push(usize::try_from(d).map_err(|_| {
                    corrupt(format!("tensor {name:?}: dim {d} too large"), dims_at)
                })?);
            }
            let type_at = r.at;
            let id = r.u32(&format!("type of {name:?}"))?;
            let ggml_type = GgmlType::from_id(id).ok_or_else(|| {
                corrupt(
                    format!("tensor {name:?} has unknown GGML type {id}"),
                    type_at,
                )
            })?;
            let offset = r.u64(&format!("offset of {name:?}"))?;
            let shape: Vec<usize> = ne.iter().rev().copied().collect();
            let elems = checked_count("gguf", &shape, 1).map_err(|_| {
                corrupt(
                    format!("tensor {name:?}: shape {shape:?} overflows"),
                    dims_at,
                )
            })?;
            let (block_elems, _) = ggml_type.block();
            if !ne[0].is_multiple_of(block_elems) {
                return Err(corrupt(
                    format!(
                        "tensor {name:?}: rows of {} elements are not whole {ggml_type} blocks of {block_elems}",
                        ne[0]
                    ),
                    dims_at,
                ));
            }
            let bytes = ggml_type.bytes_for(elems as u64).ok_or_else(|| {
                corrupt(
                    format!("tensor {name:?}: size of shape {shape:?} overflows"),
                    dims_at,
                )
            })?;
            if !offset.is_multiple_of(alignment) {
                return Err(corrupt(
                    format!(
                        "tensor {name:?}: offset {offset} is not a multiple of the alignment {alignment}"
                    ),
                    type_at + 4,
                ));
            }
            if by_name.insert(name.clone(), tensors.len()).is_some() {
                return Err(corrupt(format!("duplicate tensor name {name:?}"), at));
            }
            tensors.push(GgufTensorInfo {
                name,
                shape,
                ggml_type,
                offset,
                bytes,
            });
        }
        let data_start = (r.at as u64).div_ceil(alignment) * alignment;
        let len = bytes.len() as u64;
        for t in &tensors {
            let end = data_start
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(t.bytes));
            if end.is_none_or(|e| e > len) {
                return Err(corrupt(
                    format!(
                        "tensor {:?}: {} bytes at data offset {} run past the end of the file ({len} bytes, data from {data_start})",
                        t.name, t.bytes, t.offset
                    ),
                    data_start.saturating_add(t.offset).min(len) as usize,
                ));
            }
        }
        Ok(Self {
            version,
            metadata,
            tensors,
            by_name,
            alignment,
            data_start,
            bytes,
        })
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The metadata, in file order.
    pub fn metadata(&self) -> &[(String, GgufValue)] {
        &self.metadata
    }

    /// The metadata value under `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The tensor infos, in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The info of the tensor `name`.
    pub fn tensor_info(&self, name: &str) -> Option<&GgufTensorInfo> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// The data alignment.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    fn info(&self, op: &'static str, name: &str) -> Result<&GgufTensorInfo> {
        self.tensor_info(name).ok_or_else(|| Error::BadParameter {
            op,
            what: format!("no tensor named {name:?} in the file"),
        })
    }

    /// The data of tensor `name`, as stored.
    ///
    /// # Errors
    /// [`Error::BadParameter`] when the file has no such tensor.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let t = self.info("Gguf::tensor_bytes", name)?;
        // In range: checked when the file was parsed.
        let start = (self.data_start + t.offset) as usize;
        Ok(&self.bytes[start..start + t.bytes as usize])
    }

    /// Tensor `name` on `device`: dense elements (F32, F16, BF16, I64) as
    /// their dtype, quantized blocks as block storage (see
    /// [`DynTensor::from_blocks`]).
    ///
    /// # Errors
    /// [`Error::BadParameter`] when the file has no such tensor or its type
    /// is one ferrocm does not compute with; [`Error::Host`] when the upload
    /// fails.
    pub fn tensor(&self, name: &str, device: &Device) -> Result<DynTensor> {
        let op = "Gguf::tensor";
        let t = self.info(op, name)?;
        let data = self.tensor_bytes(name)?;
        match t.ggml_type {
            GgmlType::Quant(f) => DynTensor::from_blocks(data, f, &t.shape, device),
            GgmlType::Dense(d) => dense(d, data, &t.shape, device),
            GgmlType::Other(_) => Err(Error::BadParameter {
                op,
                what: format!(
                    "tensor {name:?} is {}, which ferrocm does not compute with",
                    t.ggml_type
                ),
            }),
        }
    }

    /// Tensor `name` on `device` as a [`QTensor`] (quantized tensors only).
    ///
    /// # Errors
    /// [`Error::BadParameter`] when the file has no such tensor or it is not
    /// quantized; [`Error::Host`] when the upload fails.
    pub fn qtensor(&self, name: &str, device: &Device) -> Result<QTensor> {
        let op = "Gguf::qtensor";
        let t = self.info(op, name)?;
        match t.ggml_type {
            GgmlType::Quant(f) => {
                QTensor::from_bytes(self.tensor_bytes(name)?, f, &t.shape, device)
            }
            other => Err(Error::BadParameter {
                op,
                what: format!("tensor {name:?} is {other}, not a quantized format"),
            }),
        }
    }
}

/// Dense bytes as a tensor of `dtype`.
fn dense(dtype: DType, data: &[u8], shape: &[usize], device: &Device) -> Result<DynTensor> {
    fn typed<T: crate::WithDType>(
        data: &[u8],
        shape: &[usize],
        device: &Device,
    ) -> Result<DynTensor> {
        // The mapping is only byte-aligned: copy into T's alignment.
        let v: Vec<T> = data
            .chunks_exact(size_of::<T>())
            .map(bytemuck::pod_read_unaligned)
            .collect();
        Ok(Tensor::from_slice(&v, shape, device)?.into())
    }
    match dtype {
        DType::F32 => typed::<f32>(data, shape, device),
        DType::F16 => typed::<half::f16>(data, shape, device),
        DType::BF16 => typed::<half::bf16>(data, shape, device),
        DType::I64 => typed::<i64>(data, shape, device),
        other => Err(Error::UnsupportedDType {
            op: "Gguf::tensor",
            dtype: other,
        }),
    }
}

/// Builds a GGUF file (version 3): metadata and tensors in the order they
/// are added, data aligned to `general.alignment` (32 unless set).
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, GgufValue)>,
    tensors: Vec<(String, Vec<usize>, GgmlType, Vec<u8>)>,
}

impl GgufWriter {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) metadata `key`.
    pub fn metadata(&mut self, key: &str, value: GgufValue) -> &mut Self {
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some(kv) => kv.1 = value,
            None => self.metadata.push((key.to_string(), value)),
        }
        self
    }

    fn push(
        &mut self,
        op: &'static str,
        name: &str,
        shape: &[usize],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self> {
        if self.tensors.iter().any(|t| t.0 == name) {
            return Err(Error::BadParameter {
                op,
                what: format!("a tensor named {name:?} was already added"),
            });
        }
        if shape.is_empty() || shape.len() > MAX_DIMS {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "tensor {name:?} has shape {shape:?}: GGUF holds 1 to {MAX_DIMS} dims"
                ),
            });
        }
        self.tensors
            .push((name.to_string(), shape.to_vec(), ty, data));
        Ok(self)
    }

    /// Adds a quantized tensor.
    ///
    /// # Errors
    /// [`Error::BadParameter`] for a duplicate name or more than 4 dims;
    /// [`Error::Host`] when reading the blocks back fails.
    pub fn qtensor(&mut self, name: &str, t: &QTensor) -> Result<&mut Self> {
        let data = t.to_bytes()?;
        self.push(
            "GgufWriter::qtensor",
            name,
            t.shape(),
            GgmlType::Quant(t.format()),
            data,
        )
    }

    /// Adds a dense tensor (f32, f16, bf16 or i64) or block storage.
    ///
    /// # Errors
    /// [`Error::UnsupportedDType`] for a dtype GGUF has no type for (u8,
    /// u32); [`Error::BadParameter`] for a duplicate name or more than 4
    /// dims; [`Error::Host`] when reading the tensor back fails.
    pub fn tensor(&mut self, name: &str, t: &DynTensor) -> Result<&mut Self> {
        let op = "GgufWriter::tensor";
        if let crate::Format::Blocks(_) = t.format() {
            return self.qtensor(name, &QTensor::from_dyn(t)?);
        }
        let dtype = t.dtype()?;
        if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::I64) {
            return Err(Error::UnsupportedDType { op, dtype });
        }
        let c = t.contiguous()?;
        let size = dtype.size_in_bytes();
        let all = c
            .shared_storage()
            .raw()
            .typed::<u8>()
            .expect("bytes always divide")
            .download()?;
        let data = all[c.layout().offset() * size..][..c.elem_count() * size].to_vec();
        self.push(op, name, t.shape(), GgmlType::Dense(dtype), data)
    }

    /// Adds a tensor from its bytes as stored in a GGUF file.
    ///
    /// # Errors
    /// [`Error::BadParameter`] when `data` is not the size of `shape` in
    /// `ty`, for a duplicate name or more than 4 dims;
    /// [`Error::UnsupportedDType`] for a dense dtype GGUF has no type for.
    pub fn raw(
        &mut self,
        name: &str,
        shape: &[usize],
        ty: GgmlType,
        data: Vec<u8>,
    ) -> Result<&mut Self> {
        let op = "GgufWriter::raw";
        if let GgmlType::Dense(dtype) = ty
            && !matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::I64)
        {
            return Err(Error::UnsupportedDType { op, dtype });
        }
        let elems = checked_count(op, shape, 1)? as u64;
        if ty.bytes_for(elems) != Some(data.len() as u64) {
            return Err(Error::BadParameter {
                op,
                what: format!(
                    "{} bytes given for tensor {name:?} of shape {shape:?} in {ty}",
                    data.len()
                ),
            });
        }
        self.push(op, name, shape, ty, data)
    }

    /// The file's bytes.
    ///
    /// # Errors
    /// [`Error::BadParameter`] when `general.alignment` is set and is not a
    /// power-of-two u32, or an array holds an item of another type than its
    /// item type.
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }

    /// Writes the file to `path`.
    ///
    /// # Errors
    /// [`Error::Io`] when writing fails; as [`GgufWriter::to_bytes`].
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io = |e: std::io::Error| Error::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        let mut w = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        std::io::Write::write_all(&mut w, &out).map_err(io)?;
        std::io::Write::flush(&mut w).map_err(io)
    }

    fn write_to(&self, out: &mut Vec<u8>) -> Result<()> {
        let alignment = match self.metadata.iter().find(|(k, _)| k == "general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some((_, GgufValue::U32(a))) if a.is_power_of_two() => *a as u64,
            Some((_, v)) => {
                return Err(Error::BadParameter {
                    op: "GgufWriter",
                    what: format!("general.alignment {v} is not a power-of-two u32"),
                });
            }
        };
        fn check(key: &str, v: &GgufValue) -> Result<()> {
            if let GgufValue::Array { item_type, items } = v {
                for i in items {
                    if i.type_id() != *item_type {
                        return Err(Error::BadParameter {
                            op: "GgufWriter",
                            what: format!(
                                "metadata {key:?}: an item of type {} in an array of type {item_type}",
                                i.type_id()
                            ),
                        });
                    }
                    check(key, i)?;
                }
            }
            Ok(())
        }
        for (k, v) in &self.metadata {
            check(k, v)?;
        }
        out.extend(MAGIC);
        out.extend(3u32.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.metadata.len() as u64).to_le_bytes());
        for (k, v) in &self.metadata {
            put_string(out, k);
            out.extend(v.type_id().to_le_bytes());
            put_value(out, v);
        }
        let pad = |n: u64| n.div_ceil(alignment) * alignment;
        let mut offset = 0u64;
        for (name, shape, ty, data) in &self.tensors {
            put_string(out, name);
            out.extend((shape.len() as u32).to_le_bytes());
            for &d in shape.iter().rev() {
                out.extend((d as u64).to_le_bytes());
            }
            out.extend(ty.id().to_le_bytes());
            out.extend(offset.to_le_bytes());
            offset = pad(offset + data.len() as u64);
        }
        // The data section starts aligned; a file without tensors has none,
        // and is not padded (the reader, like GGML's, seeks only when there
        // are tensors; `general.alignment` may be up to 2^31).
        if !self.tensors.is_empty() {
            out.resize(pad(out.len() as u64) as usize, 0);
        }
        for (_, _, _, data) in &self.tensors {
            out.extend(data);
            out.resize(pad(out.len() as u64) as usize, 0);
        }
        Ok(())
    }
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => out.push(*x),
        GgufValue::I8(x) => out.push(*x as u8),
        GgufValue::U16(x) => out.extend(x.to_le_bytes()),
        GgufValue::I16(x) => out.extend(x.to_le_bytes()),
        GgufValue::U32(x) => out.extend(x.to_le_bytes()),
        GgufValue::I32(x) => out.extend(x.to_le_bytes()),
        GgufValue::F32(x) => out.extend(x.to_le_bytes()),
        GgufValue::Bool(x) => out.push(*x as u8),
        GgufValue::String(s) => put_string(out, s),
        GgufValue::Array { item_type, items } => {
            out.extend(item_type.to_le_bytes());
            out.extend((items.len() as u64).to_le_bytes());
            for i in items {
                put_value(out, i);
            }
        }
        GgufValue::U64(x) => out.extend(x.to_le_bytes()),
        GgufValue::I64(x) => out.extend(x.to_le_bytes()),
        GgufValue::F64(x) => out.extend(x.to_le_bytes()),
    }
}
