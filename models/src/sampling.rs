//! Choosing the next token from logits: greedy (argmax on the device, one
//! id read back) or llama.cpp's default chain — repetition penalty, top-k,
//! top-p, min-p, temperature, then a seeded draw.
//!
//! What crosses to the host: greedy reads one `u32` (and without the
//! penalty [`Sampler::choose_on_device`] leaves it on the device, for a
//! decode loop that queues the next step before reading it); with top-k the `k`
//! best logits and their ids come back (found on the device); without
//! top-k the whole row is read. The penalty touches the recent tokens'
//! logits only: gathered on the device, read back (at most
//! `repeat_last_n` values), scaled on the host and scattered back.

use crate::error::{Error, Result};
use ferrocm_ops::{Tensor, WithDType};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// How the next token is chosen.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingOptions {
    /// Divides the logits before the draw; 0 takes the argmax (greedy).
    pub temperature: f32,
    /// Only the `top_k` most likely tokens stay (0: all).
    pub top_k: usize,
    /// Only the most likely tokens whose probabilities sum to `top_p` stay
    /// (1: all).
    pub top_p: f32,
    /// Only tokens at least `min_p` times as likely as the most likely
    /// stay (0: all).
    pub min_p: f32,
    /// Logits of tokens among the last `repeat_last_n` are divided by it
    /// (multiplied when negative), as llama.cpp and CTRL do (1: off).
    pub repeat_penalty: f32,
    /// How many of the latest tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// The random generator's seed: one seed, one sequence of draws.
    pub seed: u64,
    /// Tokens never chosen (their logits set to -inf first, as llama.cpp's
    /// `--ignore-eos` does to the end-of-generation tokens); ids past the
    /// vocabulary are ignored.
    pub banned: Vec<u32>,
}

impl Default for SamplingOptions {
    /// llama.cpp's defaults (temperature 0.8, top-k 40, top-p 0.95, min-p
    /// 0.05, no penalty over the last 64), seed 0.
    fn default() -> Self {
        Self {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repeat_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
            banned: Vec::new(),
        }
    }
}

impl SamplingOptions {
    /// The argmax at every step.
    ///
    /// ```
    /// assert_eq!(ferrocm_models::SamplingOptions::greedy().temperature, 0.0);
    /// ```
    pub fn greedy() -> Self {
        Self {
            temperature: 0.0,
            ..Self::default()
        }
    }

    fn check(&self) -> Result<()> {
        let bad = |what: String| {
            Err(Error::BadRequest {
                op: "Sampler::new",
                what,
            })
        };
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return bad(format!(
                "temperature {} (0 or more, finite)",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p {} (in (0, 1])", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p {} (in [0, 1])", self.min_p));
        }
        if !(self.repeat_penalty > 0.0 && self.repeat_penalty.is_finite()) {
            return bad(format!(
                "repeat_penalty {} (positive, finite)",
                self.repeat_penalty
            ));
        }
        Ok(())
    }
}

/// A sampler: the options and the random generator's state.
///
/// ```
/// use ferrocm_models::{Sampler, SamplingOptions};
/// use ferrocm_ops::{Device, Tensor};
/// let logits = Tensor::from_slice(&[0.5f32, 3.0, -1.0, 2.9], &[1, 4], &Device::Cpu)?;
/// let mut greedy = Sampler::new(SamplingOptions::greedy())?;
/// assert_eq!(greedy.sample(&logits, &[])?, 1);
/// // With the penalty, token 1 (just generated) loses to token 3.
/// let mut penalised = Sampler::new(SamplingOptions { repeat_penalty: 1.5, ..SamplingOptions::greedy() })?;
/// assert_eq!(penalised.sample(&logits, &[1])?, 3);
/// // A banned token is never chosen.
/// let mut banned = Sampler::new(SamplingOptions { banned: vec![1], ..SamplingOptions::greedy() })?;
/// assert_eq!(banned.sample(&logits, &[])?, 3);
/// // top-k 1 leaves one candidate whatever the temperature.
/// let mut one = Sampler::new(SamplingOptions { temperature: 5.0, top_k: 1, ..Default::default() })?;
/// assert_eq!(one.sample(&logits, &[])?, 1);
/// # Ok::<(), ferrocm_models::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Sampler {
    opts: SamplingOptions,
    rng: StdRng,
    /// The banned ids below a vocabulary size, on a device: uploaded once
    /// (an upload waits for the device's queued work).
    banned_ids: Option<(usize, Tensor<u32>)>,
}

impl Sampler {
    /// A sampler seeded with `opts.seed`.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for a negative or non-finite temperature, a
    /// top-p outside `(0, 1]`, a min-p outside `[0, 1]`, a penalty that is
    /// not positive and finite.
    pub fn new(opts: SamplingOptions) -> Result<Self> {
        opts.check()?;
        let rng = StdRng::seed_from_u64(opts.seed);
        Ok(Self {
            opts,
            rng,
            banned_ids: None,
        })
    }

    /// Whether [`Sampler::choose_on_device`] applies: greedy choice without
    /// the repetition penalty (which reads the recent tokens' logits back).
    ///
    /// ```
    /// use ferrocm_models::{Sampler, SamplingOptions};
    /// assert!(Sampler::new(SamplingOptions::greedy())?.chooses_on_device());
    /// assert!(!Sampler::new(SamplingOptions::default())?.chooses_on_device());
    /// # Ok::<(), ferrocm_models::Error>(())
    /// ```
    pub fn chooses_on_device(&self) -> bool {
        let o = &self.opts;
        o.temperature == 0.0 && (o.repeat_penalty == 1.0 || o.repeat_last_n == 0)
    }

    /// The next token chosen on the logits' device and left there, as a
    /// one-element `u32` tensor: the argmax with the banned tokens at -inf,
    /// the token [`Sampler::sample`] returns for the same logits. Nothing
    /// is read back, so a decode loop can feed it to the next step before
    /// reading it ([`Tensor::to_vec_queued`]).
    ///
    /// ```
    /// use ferrocm_models::{Sampler, SamplingOptions};
    /// use ferrocm_ops::{Device, Tensor};
    /// let logits = Tensor::from_slice(&[0.5f32, 3.0, -1.0, 2.9], &[1, 4], &Device::Cpu)?;
    /// let mut s = Sampler::new(SamplingOptions { banned: vec![1], ..SamplingOptions::greedy() })?;
    /// assert_eq!(s.choose_on_device(&logits)?.to_vec()?, vec![3]);
    /// # Ok::<(), ferrocm_models::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::BadRequest`] for logits of another shape, or where
    /// [`Sampler::chooses_on_device`] is false; [`Error::Op`] when an op
    /// fails.
    pub fn choose_on_device<T: WithDType>(&mut self, logits: &Tensor<T>) -> Result<Tensor<u32>> {
        let op = "Sampler::choose_on_device";
        if !self.chooses_on_device() {
            return Err(Error::BadRequest {
                op,
                what: format!(
                    "temperature {} and repeat_penalty {} choose on the host",
                    self.opts.temperature, self.opts.repeat_penalty
                ),
            });
        }
        let row = self.without_banned(one_row(op, logits)?)?;
        Ok(row.argmax(&[0], false)?.reshape(&[1])?)
    }

    /// `row` with the banned tokens' logits set to -inf (on its device).
    fn without_banned<T: WithDType>(&mut self, row: Tensor<T>) -> Result<Tensor<T>> {
        let vocab = row.elem_count();
        let ids = match &self.banned_ids {
            Some((v, ids)) if *v == vocab && ids.device() == row.device() => ids.clone(),
            _ => {
                let mut banned: Vec<u32> = self
                    .opts
                    .banned
                    .iter()
                    .copied()
                    .filter(|&id| (id as usize) < vocab)
                    .collect();
                banned.sort_unstable();
                banned.dedup();
                if banned.is_empty() {
                    return Ok(row);
                }
                let ids = Tensor::from_slice(&banned, &[banned.len()], row.device())?;
                self.banned_ids = Some((vocab, ids.clone()));
                ids
            }
        };
        let inf = Tensor::full(
            T::from_f64(f64::NEG_INFINITY),
            &[ids.elem_count()],
            row.device(),
        )?;
        Ok(row.scatter(0, &ids, &inf)?)
    }

    /// The options.
    pub fn options(&self) -> &SamplingOptions {
        &self.opts
    }

    /// The next token from `logits` (`[vocab]` or `[1, vocab]`), with
    /// `history` the tokens so far (prompt and generated) for the penalty.
    ///
    /// # Errors
    /// [`Error::BadRequest`] for logits of another shape or, when sampling,
    /// holding NaN; [`Error::Op`] when an op fails.
    pub fn sample<T: WithDType>(&mut self, logits: &Tensor<T>, history: &[u32]) -> Result<u32> {
        let op = "Sampler::sample";
        let mut row = one_row(op, logits)?;
        let vocab = row.elem_count();
        let o = &self.opts;
        if o.repeat_penalty != 1.0 && o.repeat_last_n > 0 && !history.is_empty() {
            let mut recent: Vec<u32> = history[history.len().saturating_sub(o.repeat_last_n)..]
                .iter()
                .copied()
                .filter(|&id| (id as usize) < vocab)
                .collect();
            recent.sort_unstable();
            recent.dedup();
            if !recent.is_empty() {
                let ids = Tensor::from_slice(&recent, &[recent.len()], row.device())?;
                let seen = row.gather(0, &ids)?.to_vec()?;
                let p = o.repeat_penalty as f64;
                let scaled: Vec<T> = seen
                    .iter()
                    .map(|v| {
                        let v = v.to_f64();
                        T::from_f64(if v > 0.0 { v / p } else { v * p })
                    })
                    .collect();
                let scaled = Tensor::from_vec(scaled, &[recent.len()], row.device())?;
                row = row.scatter(0, &ids, &scaled)?;
            }
        }
        let row = self.without_banned(row)?;
        let o = &self.opts;
        if o.temperature == 0.0 {
            return Ok(row.argmax(&[0], false)?.to_vec()?[0]);
        }
        // Candidates, best first.
        let mut cand: Vec<(f64, u32)> = if o.top_k > 0 && o.top_k < vocab {
            let (v, i) = row.topk(o.top_k, true)?;
            v.to_vec()?
                .iter()
                .map(|v| v.to_f64())
                .zip(i.to_vec()?)
                .collect()
        } else {
            let v = row.to_vec()?;
            let mut c: Vec<(f64, u32)> = v.iter().map(|v| v.to_f64()).zip(0u32..).collect();
            c.sort_by(|a, b| b.0.total_cmp(&a.0));
            c
        };
        if cand.iter().any(|c| c.0.is_nan()) {
            return Err(Error::BadRequest {
                op,
                what: "the logits hold NaN".into(),
            });
        }
        // top-p and min-p on the probabilities at temperature 1 (llama.cpp
        // applies the temperature last).
        let probs = softmax(cand.iter().map(|c| c.0), 1.0);
        if o.top_p < 1.0 {
            let mut sum = 0.0;
            let keep = probs
                .iter()
                .position(|p| {
                    sum += p;
                    sum >= o.top_p as f64
                })
                .map_or(cand.len(), |i| i + 1);
            cand.truncate(keep);
        }
        if o.min_p > 0.0 {
            let floor = probs[0] * o.min_p as f64;
            let keep = probs
                .iter()
                .take(cand.len())
                .take_while(|&&p| p >= floor)
                .count();
            cand.truncate(keep.max(1));
        }
        let probs = softmax(cand.iter().map(|c| c.0), o.temperature as f64);
        let mut u: f64 = self.rng.random();
        for (p, c) in probs.iter().zip(&cand) {
            if u < *p {
                return Ok(c.1);
            }
            u -= p;
        }
        Ok(cand.last().expect("at least one candidate").1)
    }
}

/// `logits` (`[vocab]` or `[1, vocab]`) as one row, or the error naming
/// `op` and the shape.
fn one_row<T: WithDType>(op: &'static str, logits: &Tensor<T>) -> Result<Tensor<T>> {
    let vocab = *logits.shape().last().unwrap_or(&0);
    if logits.elem_count() != vocab || vocab == 0 {
        return Err(Error::BadRequest {
            op,
            what: format!("logits of shape {:?} (one row expected)", logits.shape()),
        });
    }
    Ok(logits.reshape(&[vocab])?)
}

/// `softmax(logits / temperature)` in f64 (the first logit is the largest;
/// -inf logits get probability 0).
fn softmax(logits: impl Iterator<Item = f64> + Clone, temperature: f64) -> Vec<f64> {
    let max = logits.clone().fold(f64::NEG_INFINITY, f64::max);
    if max.is_infinite() {
        // All -inf: uniform. Some +inf: uniform over those.
        let hit: Vec<f64> = logits
            .map(|l| (max == f64::NEG_INFINITY || l == max) as u8 as f64)
            .collect();
        let n: f64 = hit.iter().sum();
        return hit.into_iter().map(|h| h / n).collect();
    }
    let e: Vec<f64> = logits.map(|l| ((l - max) / temperature).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|v| v / sum).collect()
}
