//! Text in, text out: a chat through the model's template, and stop
//! strings over streamed text.

use crate::error::{Error, Result};
use crate::generate::Generation;
use crate::llama::Llama;
use crate::sampling::SamplingOptions;
use crate::tokenizer::{ChatMessage, Tokenizer};
use ferrocm_ops::WithDType;

/// Ends streamed text at the first of some strings: [`StopStrings::push`]
/// returns what is safe to show, holding back a tail that could still
/// become a stop string, and everything before the stop once one appears.
///
/// ```
/// use ferrocm_models::chat::StopStrings;
/// let mut stop = StopStrings::new(["\nUser:"]);
/// assert_eq!(stop.push("Hello"), ("Hello".to_string(), false));
/// assert_eq!(stop.push(" there\nUs"), (" there".to_string(), false)); // "\nUs" held back
/// assert_eq!(stop.push("er: hi"), ("".to_string(), true));
/// ```
#[derive(Clone, Debug, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    pending: String,
    stopped: bool,
}

impl StopStrings {
    /// Stops at any of `stops` (empty strings are ignored).
    pub fn new<S: Into<String>>(stops: impl IntoIterator<Item = S>) -> Self {
        Self {
            stops: stops
                .into_iter()
                .map(Into::into)
                .filter(|s: &String| !s.is_empty())
                .collect(),
            ..Self::default()
        }
    }

    /// Whether a stop string has been seen.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// Takes the next piece of text; returns the text that can be shown
    /// and whether a stop string ended the text (nothing after it is ever
    /// returned).
    pub fn push(&mut self, text: &str) -> (String, bool) {
        if self.stopped {
            return (String::new(), true);
        }
        self.pending.push_str(text);
        let first_stop = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min();
        if let Some(at) = first_stop {
            self.stopped = true;
            let out = self.pending[..at].to_owned();
            self.pending.clear();
            return (out, true);
        }
        // Hold back the longest tail that begins some stop string.
        let held = self
            .pending
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| {
                let tail = &self.pending[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.pending.len());
        let out = self.pending[..held].to_owned();
        self.pending.drain(..held);
        (out, false)
    }

    /// The text held back (the generation ended without a stop string).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }
}

/// A conversation with a model through its chat template: each
/// [`Chat::send`] renders the conversation, runs only what the cache does
/// not hold yet, and streams the reply until an end-of-turn token.
///
/// ```
/// use ferrocm_models::{chat::Chat, synthetic::SyntheticModel, Arch, Llama, SamplingOptions, Tokenizer};
/// use ferrocm_ops::{quant::gguf::Gguf, Device};
/// let file = Gguf::from_bytes(SyntheticModel::new(Arch::Llama).to_gguf()?.to_bytes()?)?;
/// let model = Llama::<f32>::load(&file, &Device::Cpu, &Default::default())?;
/// let tokenizer = Tokenizer::from_gguf(&file)?;
/// let mut chat = Chat::new(&model, &tokenizer, SamplingOptions::greedy())?;
/// let mut streamed = String::new();
/// let reply = chat.send("Hello", 8, |piece| { streamed.push_str(piece); true })?;
/// assert_eq!(reply, streamed);
/// assert_eq!(chat.messages().len(), 2); // the user's and the reply
/// # Ok::<(), ferrocm_models::Error>(())
/// ```
pub struct Chat<'m, T: WithDType> {
    generation: Generation<'m, T>,
    tokenizer: &'m Tokenizer,
    messages: Vec<ChatMessage>,
    /// The text whose tokens the cache holds: the last rendered prompt and
    /// the reply after it.
    cached: String,
}

impl<'m, T: WithDType> Chat<'m, T> {
    /// A new conversation, stopping each reply at the tokenizer's
    /// end-of-generation tokens.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the tokenizer has no chat template;
    /// [`Error::BadRequest`] when its vocabulary is larger than the
    /// model's; as [`Generation::new`].
    pub fn new(
        model: &'m Llama<T>,
        tokenizer: &'m Tokenizer,
        sampling: SamplingOptions,
    ) -> Result<Self> {
        if tokenizer.chat_template().is_none() {
            return Err(Error::Unsupported {
                what: "a chat".into(),
                why: "the file has no tokenizer.chat_template".into(),
            });
        }
        check_vocabularies(model, tokenizer)?;
        let mut generation = Generation::new(model, sampling)?;
        generation.stop_at(tokenizer.end_of_generation());
        Ok(Self {
            generation,
            tokenizer,
            messages: Vec::new(),
            cached: String::new(),
        })
    }

    /// Starts the conversation with a system message.
    pub fn with_system(mut self, text: impl Into<String>) -> Self {
        self.messages.push(ChatMessage::new("system", text));
        self
    }

    /// [`Generation::warm_up`] for prompts of `prompt_len` tokens, before
    /// the first message.
    ///
    /// # Errors
    /// As [`Generation::warm_up`] (a chat already started is a bad request).
    pub fn warm_up(&mut self, prompt_len: usize) -> Result<()> {
        self.generation.warm_up(prompt_len)
    }

    /// The messages so far.
    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    /// The generation underneath (its stats are the last reply's).
    pub fn generation(&self) -> &Generation<'m, T> {
        &self.generation
    }

    /// Adds the user's `text`, generates a reply of at most `max_tokens`
    /// tokens, calls `on_text` with each piece of it as it completes (false
    /// stops it) and returns the reply, which joins the conversation.
    ///
    /// # Errors
    /// [`Error::ContextOverflow`] when the conversation no longer fits
    /// (the message is not added); template and tokenizer errors; as
    /// [`Generation::generate`].
    pub fn send(
        &mut self,
        text: &str,
        max_tokens: usize,
        mut on_text: impl FnMut(&str) -> bool,
    ) -> Result<String> {
        self.messages.push(ChatMessage::new("user", text));
        let result = self.reply(max_tokens, &mut on_text);
        match result {
            Ok(reply) => {
                self.messages
                    .push(ChatMessage::new("assistant", reply.clone()));
                Ok(reply)
            }
            Err(e) => {
                self.messages.pop();
                Err(e)
            }
        }
    }

    fn reply(
        &mut self,
        max_tokens: usize,
        on_text: &mut impl FnMut(&str) -> bool,
    ) -> Result<String> {
        let rendered = self.tokenizer.apply_chat_template(&self.messages, true)?;
        let ids = match rendered.strip_prefix(self.cached.as_str()) {
            // The cache holds the start: run the rest (special tokens parsed, no BOS).
            Some(rest) if !self.cached.is_empty() && !rest.is_empty() => {
                self.tokenizer.encode_with(rest, false, true)?
            }
            // The template rewrote earlier turns (or this is the first): start over.
            _ => {
                self.generation.reset();
                self.cached.clear();
                encode_prompt(self.tokenizer, &rendered)?
            }
        };
        let mut stream = self.tokenizer.stream();
        let mut reply = String::new();
        self.generation
            .generate(&ids, max_tokens, |id| match stream.push(id) {
                Some(piece) => {
                    reply.push_str(&piece);
                    on_text(&piece)
                }
                None => true,
            })?;
        if let Some(rest) = stream.finish() {
            reply.push_str(&rest);
            on_text(&rest);
        }
        self.cached = rendered + &reply;
        Ok(reply)
    }
}

/// `text` as a prompt's ids: BOS as the file asks, unless the text (a
/// rendered template) already starts with it.
///
/// # Errors
/// As [`Tokenizer::encode`].
pub fn encode_prompt(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    let bos_text = tokenizer.bos().and_then(|id| tokenizer.token_text(id));
    match bos_text {
        Some(bos) if !bos.is_empty() && text.starts_with(bos) => {
            tokenizer.encode_with(text, false, true)
        }
        _ => tokenizer.encode(text),
    }
}

/// A tokenizer whose ids the model cannot take is refused up front.
///
/// # Errors
/// [`Error::BadRequest`] naming both sizes.
pub fn check_vocabularies<T: WithDType>(model: &Llama<T>, tokenizer: &Tokenizer) -> Result<()> {
    if tokenizer.vocab_size() > model.config().vocab {
        return Err(Error::BadRequest {
            op: "tokenizer",
            what: format!(
                "the tokenizer has {} tokens, the model's embedding {}",
                tokenizer.vocab_size(),
                model.config().vocab
            ),
        });
    }
    Ok(())
}
