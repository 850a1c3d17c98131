//! Generation: the prompt in one batched forward (prefill), then one token
//! at a time (decode), each step's ops queued back to back on the device
//! and only the chosen token read back.
//!
//! On a GPU, where the token is chosen on the device (greedy, no penalty:
//! [`Sampler::chooses_on_device`]), decode is pipelined: step `i + 1` is
//! queued with step `i`'s token still on the device, before the host reads
//! that token, so the GPU never waits for the host between steps (the
//! read, the stop checks and the recording of the next step's graphs all
//! happen while a step runs). When the token read turns out to end the
//! generation, the step queued after it is dropped from the cache.

use crate::error::{Error, Result};
use crate::llama::{KvCache, Llama, Logits, StepGraphs};
use crate::sampling::{Sampler, SamplingOptions};
use ferrocm_ops::{QueuedVec, Tensor, WithDType};
use std::time::{Duration, Instant};

/// Where the time of a generation went.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GenerationStats {
    /// Prompt tokens run.
    pub prompt_tokens: usize,
    /// From the prompt's forward to its first token chosen.
    pub prefill: Duration,
    /// Tokens generated after the first (each a decode step).
    pub decode_tokens: usize,
    /// Their time.
    pub decode: Duration,
    /// Of that, the time the host spent queueing the decode steps' forward
    /// passes (a GPU runs them asynchronously: when this is most of
    /// `decode`, the steps are bound by the host's launches, not the GPU).
    pub decode_queueing: Duration,
    /// Decode steps recorded and launched as graphs (see
    /// [`Generation::record_graphs`]).
    pub decode_graphs: usize,
    /// Why decode steps stopped being recorded as graphs, if they did (the
    /// steps then run as queued).
    pub graphs_off: Option<String>,
    /// Whether decode was pipelined (each step queued before the last
    /// one's token was read: see the module doc).
    pub pipelined: bool,
}

impl GenerationStats {
    /// Prompt tokens per second.
    pub fn prefill_tokens_per_second(&self) -> f64 {
        self.prompt_tokens as f64 / self.prefill.as_secs_f64().max(1e-12)
    }

    /// Decoded tokens per second.
    pub fn decode_tokens_per_second(&self) -> f64 {
        self.decode_tokens as f64 / self.decode.as_secs_f64().max(1e-12)
    }
}

/// One sequence being generated: the model, its KV cache, the sampler and
/// the tokens so far. Successive [`Generation::generate`] calls continue
/// the same sequence (a chat's turns).
///
/// ```
/// use ferrocm_models::{synthetic::SyntheticModel, Arch, Generation, Llama, SamplingOptions};
/// use ferrocm_ops::{quant::gguf::Gguf, Device};
/// let file = Gguf::from_bytes(SyntheticModel::new(Arch::Llama).to_gguf()?.to_bytes()?)?;
/// let model = Llama::<f32>::load(&file, &Device::Cpu, &Default::default())?;
/// let mut g = Generation::new(&model, SamplingOptions::default())?;
/// let mut streamed = Vec::new();
/// let out = g.generate(&[5, 6, 7], 3, |t| { streamed.push(t); true })?;
/// assert_eq!(out, streamed);
/// assert_eq!(g.tokens().len(), 6); // prompt and output
/// # Ok::<(), ferrocm_models::Error>(())
/// ```
#[derive(Debug)]
pub struct Generation<'m, T: WithDType> {
    model: &'m Llama<T>,
    cache: KvCache<T>,
    sampler: Sampler,
    tokens: Vec<u32>,
    stop: Vec<u32>,
    stats: GenerationStats,
    /// The decode step's graphs, where the device records them.
    graph: Option<StepGraphs>,
    /// A second set for pipelined decode, which alternates between the two:
    /// a set is updated only once its last launch has finished.
    spare: Option<StepGraphs>,
    /// Blocks a graph as [`Generation::record_graphs`] set them (`None`:
    /// the mode's default).
    graph_blocks: Option<usize>,
    /// Whether decode is pipelined as [`Generation::pipeline`] set it
    /// (`None`: on GPUs).
    pipeline: Option<bool>,
}

/// A decode step queued ahead: the token it chose, on the device, and the
/// read of that token.
struct Ahead {
    token: Tensor<u32>,
    read: QueuedVec<u32>,
}

impl<'m, T: WithDType> Generation<'m, T> {
    /// A new sequence with a cache of the model's whole context.
    ///
    /// # Errors
    /// As [`Llama::new_cache`] and [`Sampler::new`].
    pub fn new(model: &'m Llama<T>, sampling: SamplingOptions) -> Result<Self> {
        Self::with_capacity(model, sampling, model.context())
    }

    /// A new sequence with a cache of `capacity` positions.
    ///
    /// # Errors
    /// As [`Llama::new_cache`] and [`Sampler::new`].
    pub fn with_capacity(
        model: &'m Llama<T>,
        sampling: SamplingOptions,
        capacity: usize,
    ) -> Result<Self> {
        let mut g = Self {
            model,
            sampler: Sampler::new(sampling)?,
            cache: model.new_cache(capacity)?,
            tokens: Vec::new(),
            stop: Vec::new(),
            stats: GenerationStats::default(),
            graph: None,
            spare: None,
            graph_blocks: None,
            pipeline: None,
        };
        g.make_graphs();
        Ok(g)
    }

    /// Whether decode steps are pipelined (see the module doc): with a
    /// sampler that chooses on the device ([`Sampler::chooses_on_device`]),
    /// on a GPU unless [`Generation::pipeline`] said otherwise.
    pub fn pipelines(&self) -> bool {
        let on = self.pipeline.unwrap_or(self.model.device().is_gpu());
        on && self.sampler.chooses_on_device()
    }

    /// Pipelines decode (where the sampler allows it) or not; by default a
    /// GPU does and the Cpu and the emulator do not (the queued reads are
    /// done at once there, so it gains nothing, but `true` runs the same
    /// logic). The tokens are the same either way.
    ///
    /// ```
    /// use ferrocm_models::{synthetic::SyntheticModel, Arch, Generation, Llama, SamplingOptions};
    /// use ferrocm_ops::{quant::gguf::Gguf, Device};
    /// let file = Gguf::from_bytes(SyntheticModel::new(Arch::Llama).to_gguf()?.to_bytes()?)?;
    /// let model = Llama::<f32>::load(&file, &Device::Cpu, &Default::default())?;
    /// let mut plain = Generation::new(&model, SamplingOptions::greedy())?;
    /// let mut pipelined = Generation::new(&model, SamplingOptions::greedy())?;
    /// pipelined.pipeline(true);
    /// assert!(pipelined.pipelines() && !plain.pipelines());
    /// assert_eq!(pipelined.generate(&[5, 6], 4, |_| true)?, plain.generate(&[5, 6], 4, |_| true)?);
    /// # Ok::<(), ferrocm_models::Error>(())
    /// ```
    pub fn pipeline(&mut self, on: bool) -> &mut Self {
        self.pipeline = Some(on);
        self.make_graphs();
        self
    }

    /// The graphs for the mode and [`Generation::record_graphs`]: pipelined,
    /// two sets of the whole step each by default (the host records a step
    /// while the GPU runs the last: on an H200, 7B-shaped f16 and Q4_0,
    /// whole steps decoded 1-2% faster than graphs of 2 blocks); otherwise
    /// one set of [`StepGraphs::DEFAULT_BLOCKS`].
    fn make_graphs(&mut self) {
        let pipelined = self.pipelines();
        let blocks = match (self.graph_blocks, pipelined) {
            (Some(0), _) => {
                (self.graph, self.spare) = (None, None);
                return;
            }
            (Some(n), _) => n,
            (None, true) => self.model.config().layers.max(1),
            (None, false) => StepGraphs::DEFAULT_BLOCKS,
        };
        let set = || {
            Some(StepGraphs::with_blocks_per_graph(self.model, blocks)).filter(StepGraphs::records)
        };
        self.graph = set();
        self.spare = if pipelined { set() } else { None };
        if self.spare.is_none() && pipelined {
            self.graph = None;
        }
    }

    /// Whether decode steps are recorded and launched as graphs (CUDA or
    /// HIP graphs, each of `blocks_per_graph` blocks: see
    /// [`Llama::forward_graph`]; 0 records none), which spares the host a
    /// driver call per kernel. On by default where the device records
    /// graphs: the whole step a graph when decode is pipelined
    /// ([`Generation::pipelines`]), [`StepGraphs::DEFAULT_BLOCKS`] a graph
    /// otherwise; the tokens are the same either way. A step that cannot be
    /// recorded runs as queued, and so do the rest
    /// ([`GenerationStats::graphs_off`] says why).
    pub fn record_graphs(&mut self, blocks_per_graph: usize) -> &mut Self {
        self.graph_blocks = Some(blocks_per_graph);
        self.make_graphs();
        self
    }

    /// Whether decode steps are recorded as graphs now.
    pub fn records_graphs(&self) -> bool {
        self.graph.is_some()
    }

    /// One decode step: the token's logits, through the graph while there
    /// is one.
    fn step(&mut self, token: u32) -> Result<Tensor<T>> {
        if let Some(graph) = self.graph.as_mut() {
            match self
                .model
                .forward_graph(&[token], &mut self.cache, Logits::Last, graph)
            {
                Ok(logits) => {
                    self.stats.decode_graphs += 1;
                    return Ok(logits);
                }
                // The cache is unchanged; the step runs as queued (and
                // fails there too if the fault was not the recording's).
                Err(e) => {
                    self.stats.graphs_off = Some(e.to_string());
                    (self.graph, self.spare) = (None, None);
                }
            }
        }
        self.model.forward(&[token], &mut self.cache, Logits::Last)
    }

    /// Queues the decode step of `ids` (one token, on the device) and the
    /// choice of its next token, and the read of that token, without
    /// waiting; the graph sets alternate.
    fn queue_step(&mut self, ids: &Tensor<u32>) -> Result<Ahead> {
        let queued = Instant::now();
        let mut logits = None;
        if let Some(graph) = self.graph.as_mut() {
            match self
                .model
                .forward_ids(ids, &mut self.cache, Logits::Last, Some(graph))
            {
                Ok(l) => {
                    self.stats.decode_graphs += 1;
                    std::mem::swap(&mut self.graph, &mut self.spare);
                    logits = Some(l);
                }
                // As in `step`: the cache is unchanged.
                Err(e) => {
                    self.stats.graphs_off = Some(e.to_string());
                    (self.graph, self.spare) = (None, None);
                }
            }
        }
        let logits = match logits {
            Some(l) => l,
            None => self
                .model
                .forward_ids(ids, &mut self.cache, Logits::Last, None)?,
        };
        let token = self.sampler.choose_on_device(&logits)?;
        let read = token.to_vec_queued()?;
        self.stats.decode_queueing += queued.elapsed();
        Ok(Ahead { token, read })
    }

    /// Decode from `first` (chosen, on the host) with each step queued
    /// before the last one's token is read (see the module doc): the same
    /// tokens as the plain loop in [`Generation::generate`].
    fn decode_pipelined(
        &mut self,
        first: u32,
        max_tokens: usize,
        out: &mut Vec<u32>,
        on_token: &mut impl FnMut(u32) -> bool,
        start: Instant,
    ) -> Result<()> {
        // The step running `next`, when it was queued before `next` was
        // read.
        let mut ahead: Option<Ahead> = None;
        let mut next = first;
        let result = loop {
            if self.stop.contains(&next) {
                break Ok(());
            }
            self.tokens.push(next);
            out.push(next);
            if !on_token(next) || out.len() == max_tokens {
                break Ok(());
            }
            let step = match ahead.take() {
                Some(a) => a,
                None => {
                    let ids = Tensor::from_slice(&[next], &[1], self.model.device())?;
                    match self.queue_step(&ids) {
                        Ok(a) => a,
                        Err(e) => break Err(e),
                    }
                }
            };
            self.stats.decode_tokens += 1;
            // The step after it, unless the token it reads is the last
            // one wanted.
            if out.len() + 1 < max_tokens {
                match self.queue_step(&step.token) {
                    Ok(a) => ahead = Some(a),
                    Err(e) => break Err(e),
                }
            }
            match step.read.wait() {
                Ok(t) => next = t[0],
                Err(e) => break Err(e.into()),
            }
        };
        self.stats.decode = start.elapsed();
        // A step queued for a token that ended the generation: its cache
        // position is dropped (the next call runs that token again, as
        // after the plain loop).
        if let Some(a) = ahead {
            let filled = self.cache.len();
            self.cache.truncate(filled - 1)?;
            drop(a);
        }
        result?;
        // Faults of the steps' kernels surface here (the reads report none).
        self.model.device().synchronize()?;
        Ok(())
    }

    /// Ends generation at any of `ids` (end-of-sequence, end-of-turn); the
    /// stop token is not returned.
    pub fn stop_at(&mut self, ids: &[u32]) -> &mut Self {
        self.stop = ids.to_vec();
        self
    }

    /// Every token of the sequence so far.
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// The last call's timings.
    pub fn stats(&self) -> &GenerationStats {
        &self.stats
    }

    /// The cache.
    pub fn cache(&self) -> &KvCache<T> {
        &self.cache
    }

    /// Runs a prompt of `prompt_len` tokens and one decode step through the
    /// cache and forgets them, so that a GPU that compiles or loads each
    /// kernel at its first launch (CUDA) does it here rather than inside
    /// the first token's or the decode steps' time, as llama.cpp's warm-up
    /// run does. The sequence must be empty; it is empty after.
    ///
    /// # Errors
    /// [`Error::BadRequest`] on a sequence already started;
    /// [`Error::ContextOverflow`] when `prompt_len + 1` positions do not fit;
    /// [`Error::Op`].
    pub fn warm_up(&mut self, prompt_len: usize) -> Result<()> {
        if !self.tokens.is_empty() {
            return Err(Error::BadRequest {
                op: "Generation::warm_up",
                what: format!("the sequence already holds {} tokens", self.tokens.len()),
            });
        }
        let needed = prompt_len.max(1) + 1;
        if needed > self.cache.capacity() {
            return Err(Error::ContextOverflow {
                needed,
                context: self.cache.capacity(),
            });
        }
        // The decode step as decode runs it (a graph is instantiated here;
        // pipelined, one in each set while there is room).
        let pipelined = self.pipelines();
        let result = self
            .model
            .forward(&vec![0; prompt_len.max(1)], &mut self.cache, Logits::Last)
            .and_then(|_| match pipelined {
                false => self
                    .step(0)
                    .and_then(|logits| Ok(logits.to_vec().map(|_| ())?)),
                true => {
                    let ids = Tensor::from_slice(&[0u32], &[1], self.model.device())?;
                    let first = self.queue_step(&ids)?;
                    if self.cache.len() < self.cache.capacity() {
                        self.queue_step(&first.token)?.read.wait()?;
                    }
                    first.read.wait()?;
                    Ok(())
                }
            });
        self.cache.clear();
        result.map(|_| ())
    }

    /// Starts over (the cache's memory is kept).
    pub fn reset(&mut self) {
        self.cache.clear();
        self.tokens.clear();
    }

    /// Appends `prompt` to the sequence and generates up to `max_tokens`
    /// tokens after it, calling `on_token` with each as soon as it is
    /// chosen; it stops early at a stop token or when `on_token` returns
    /// false. Returns the generated tokens.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for an empty prompt on an empty sequence;
    /// [`Error::ContextOverflow`] when the sequence, the prompt and
    /// `max_tokens` do not fit in the cache (checked before anything runs);
    /// [`Error::BadToken`]; [`Error::Op`].
    pub fn generate(
        &mut self,
        prompt: &[u32],
        max_tokens: usize,
        mut on_token: impl FnMut(u32) -> bool,
    ) -> Result<Vec<u32>> {
        if prompt.is_empty() && self.tokens.is_empty() {
            return Err(Error::BadRequest {
                op: "Generation::generate",
                what: "an empty prompt starts nothing".into(),
            });
        }
        // The last generated token has not been run yet: it leads the input.
        let mut input: Vec<u32> = self.tokens[self.cache.len()..].to_vec();
        input.extend_from_slice(prompt);
        // The last generated token is never run, so one fewer position.
        let needed = self.cache.len() + input.len() + max_tokens.saturating_sub(1);
        if needed > self.cache.capacity() {
            return Err(Error::ContextOverflow {
                needed,
                context: self.cache.capacity(),
            });
        }
        self.stats = GenerationStats {
            prompt_tokens: input.len(),
            graphs_off: self.stats.graphs_off.take(),
            ..Default::default()
        };
        let mut out = Vec::new();
        if max_tokens == 0 || input.is_empty() {
            self.tokens.extend_from_slice(prompt);
            return Ok(out);
        }
        let start = Instant::now();
        // The sequence takes the prompt only once it has run: a refused
        // prompt (an id past the vocabulary) leaves the sequence as it was.
        let logits = self.model.forward(&input, &mut self.cache, Logits::Last)?;
        self.tokens.extend_from_slice(prompt);
        let mut next = self.sampler.sample(&logits, &self.tokens)?;
        self.stats.prefill = start.elapsed();
        let start = Instant::now();
        if self.pipelines() {
            self.stats.pipelined = true;
            self.decode_pipelined(next, max_tokens, &mut out, &mut on_token, start)?;
            return Ok(out);
        }
        loop {
            if self.stop.contains(&next) {
                break;
            }
            self.tokens.push(next);
            out.push(next);
            if !on_token(next) || out.len() == max_tokens {
                break;
            }
            let queued = Instant::now();
            let logits = self.step(next)?;
            self.stats.decode_queueing += queued.elapsed();
            next = self.sampler.sample(&logits, &self.tokens)?;
            self.stats.decode_tokens += 1;
        }
        self.stats.decode = start.elapsed();
        Ok(out)
    }
}
