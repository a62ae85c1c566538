//! The tokenizer: `tokenizer.json` through the `tokenizers` crate, the EOS ids from
//! `generation_config.json` (else `config.json`, else `tokenizer_config.json`'s `eos_token`), the
//! chat template from `tokenizer_config.json`, and [`TextStream`], which turns generated ids into
//! text as they arrive without ever emitting a broken UTF-8 sequence.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::config::{ModelConfig, TokenIds};
use super::error::ModelError;

pub const TOKENIZER_FILE: &str = "tokenizer.json";
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";

/// A tokenizer with the model's stop ids and optional chat template.
#[derive(Debug)]
pub struct Tokenizer {
    path: PathBuf,
    inner: tokenizers::Tokenizer,
    eos_ids: Vec<u32>,
    chat: Option<ChatTemplate>,
    /// The model's vocabulary (config.json's `vocab_size`): a prompt's id at or above it is
    /// refused at encoding. `None` where the tokenizer was built without a model.
    model_vocab: Option<usize>,
}

/// A chat template and the special-token strings it may refer to.
#[derive(Debug, Clone)]
struct ChatTemplate {
    /// `tokenizer_config.json`, for error messages.
    path: PathBuf,
    source: String,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

/// A special token in `tokenizer_config.json`: a string or `{ "content": ... }`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum TokenText {
    Plain(String),
    Added { content: String },
}

impl TokenText {
    fn text(&self) -> &str {
        match self {
            TokenText::Plain(s) => s,
            TokenText::Added { content } => content,
        }
    }
}

/// `chat_template`: one template, or a list of named ones (the one named "default" is used).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum TemplateField {
    One(String),
    Named(Vec<NamedTemplate>),
}

#[derive(Debug, Deserialize)]
struct NamedTemplate {
    name: String,
    template: String,
}

#[derive(Debug, Default, Deserialize)]
struct TokenizerConfigFile {
    chat_template: Option<TemplateField>,
    bos_token: Option<TokenText>,
    eos_token: Option<TokenText>,
}

#[derive(Debug, Default, Deserialize)]
struct GenerationConfigFile {
    eos_token_id: Option<TokenIds>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, ModelError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|err| ModelError::Json {
                path: path.to_path_buf(),
                err,
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(ModelError::io(path, e)),
    }
}

impl Tokenizer {
    /// Loads `dir/tokenizer.json` and the stop ids and chat template around it.
    pub fn load(dir: &Path, config: &ModelConfig) -> Result<Self, ModelError> {
        let path = dir.join(TOKENIZER_FILE);
        if !path.is_file() {
            return Err(ModelError::MissingFile {
                path,
                hint: "the decoder needs the checkpoint's tokenizer.json; copy it from the \
                       model's Hugging Face repository into the directory"
                    .into(),
            });
        }
        let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| ModelError::Tokenizer {
            path: path.clone(),
            message: format!("{e}; the file is not a tokenizer the tokenizers crate can read"),
        })?;

        let config_path = dir.join(TOKENIZER_CONFIG_FILE);
        let tok_config: TokenizerConfigFile = read_json(&config_path)?.unwrap_or_default();
        let generation: GenerationConfigFile =
            read_json(&dir.join(GENERATION_CONFIG_FILE))?.unwrap_or_default();

        let mut eos_ids = match (&generation.eos_token_id, config.eos_token_ids.is_empty()) {
            (Some(ids), _) => ids.to_vec(),
            (None, false) => config.eos_token_ids.clone(),
            (None, true) => tok_config
                .eos_token
                .as_ref()
                .and_then(|t| inner.token_to_id(t.text()))
                .into_iter()
                .collect(),
        };
        eos_ids.sort_unstable();
        eos_ids.dedup();

        let source = match tok_config.chat_template {
            Some(TemplateField::One(s)) => Some(s),
            Some(TemplateField::Named(list)) => {
                let mut list = list;
                let i = list.iter().position(|t| t.name == "default").unwrap_or(0);
                (i < list.len()).then(|| list.swap_remove(i).template)
            }
            None => None,
        };
        let chat = source.map(|source| ChatTemplate {
            path: config_path.clone(),
            source,
            bos_token: tok_config.bos_token.as_ref().map(|t| t.text().to_string()),
            eos_token: tok_config.eos_token.as_ref().map(|t| t.text().to_string()),
        });
        Ok(Self {
            path,
            inner,
            eos_ids,
            chat,
            model_vocab: Some(config.vocab),
        })
    }

    /// Wraps an already built tokenizer (tests, importers).
    pub fn from_parts(path: PathBuf, inner: tokenizers::Tokenizer, eos_ids: Vec<u32>) -> Self {
        Self {
            path,
            inner,
            eos_ids,
            chat: None,
            model_vocab: None,
        }
    }

    /// The `tokenizers` tokenizer underneath.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Token ids that end generation, sorted.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    pub fn is_eos(&self, id: u32) -> bool {
        self.eos_ids.binary_search(&id).is_ok()
    }

    /// Tokens the tokenizer knows, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    /// Encodes text; `add_special_tokens` applies the post-processor (a BOS for Llama 3).
    /// Ids at or above the model's vocabulary (a tokenizer.json of another model) are refused.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, ModelError> {
        let ids = self
            .inner
            .encode(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| self.error(format!("cannot encode the prompt: {e}")))?;
        if let Some(vocab) = self.model_vocab
            && let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab)
        {
            let token = self.inner.id_to_token(id).unwrap_or_default();
            return Err(self.error(format!(
                "the prompt's token {token:?} has id {id}, but the model's vocab_size \
                 (config.json) is {vocab}: this tokenizer.json is not the checkpoint's"
            )));
        }
        Ok(ids)
    }

    /// Decodes ids into text, special tokens included.
    pub fn decode(&self, ids: &[u32]) -> Result<String, ModelError> {
        self.inner
            .decode(ids, false)
            .map_err(|e| self.error(format!("cannot decode ids {ids:?}: {e}")))
    }

    pub fn has_chat_template(&self) -> bool {
        self.chat.is_some()
    }

    /// Renders the chat template for one user message, ending with the assistant's turn.
    pub fn apply_chat_template(&self, user_message: &str) -> Result<String, ModelError> {
        let Some(chat) = &self.chat else {
            return Err(ModelError::ChatTemplate {
                path: self.path.with_file_name(TOKENIZER_CONFIG_FILE),
                message: "there is no chat_template; run without --chat".into(),
            });
        };
        chat.render(user_message)
    }

    /// The prompt's token ids: through the chat template when `chat` (then without the
    /// post-processor, as Hugging Face's `apply_chat_template` does), else encoded with it.
    pub fn encode_prompt(&self, prompt: &str, chat: bool) -> Result<Vec<u32>, ModelError> {
        if chat {
            let text = self.apply_chat_template(prompt)?;
            self.encode(&text, false)
        } else {
            self.encode(prompt, true)
        }
    }

    /// A decoder that turns ids into text as they arrive.
    pub fn stream(&self) -> TextStream<'_> {
        TextStream {
            tokenizer: self,
            ids: Vec::new(),
            prefix_offset: 0,
            read_offset: 0,
        }
    }

    fn error(&self, message: String) -> ModelError {
        ModelError::Tokenizer {
            path: self.path.clone(),
            message,
        }
    }
}

impl ChatTemplate {
    fn render(&self, user_message: &str) -> Result<String, ModelError> {
        let error = |e: minijinja::Error| ModelError::ChatTemplate {
            path: self.path.clone(),
            message: e.to_string(),
        };
        let mut env = minijinja::Environment::new();
        // Hugging Face renders chat templates with trim_blocks and lstrip_blocks.
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(error)?;
        env.set_syntax(syntax);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |message: String| -> Result<String, _> {
            Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                message,
            ))
        });
        env.add_function("strftime_now", |format: String| strftime_now(&format));
        let template = env.template_from_str(&self.source).map_err(error)?;
        let messages = vec![minijinja::context! { role => "user", content => user_message }];
        template
            .render(minijinja::context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => self.bos_token.clone().unwrap_or_default(),
                eos_token => self.eos_token.clone().unwrap_or_default(),
            })
            .map_err(error)
    }
}

/// `strftime_now(format)` as Hugging Face provides it to templates, for the UTC date: `%d`,
/// `%m`, `%Y`, `%b`, `%B`, `%H`, `%M`, `%S` and `%%`; other directives are kept as written.
fn strftime_now(format: &str) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    let rem = secs % 86_400;
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let month_name = MONTHS[(month as usize).saturating_sub(1).min(11)];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('Y') => out.push_str(&year.to_string()),
            Some('b') => out.push_str(&month_name[..3]),
            Some('B') => out.push_str(month_name),
            Some('H') => out.push_str(&format!("{:02}", rem / 3600)),
            Some('M') => out.push_str(&format!("{:02}", rem / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", rem % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01 (Howard Hinnant's
/// algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The most bytes one UTF-8 character takes.
const MAX_CHAR_BYTES: usize = 4;

/// Incremental detokenization: [`TextStream::push`] returns the text that the ids so far add,
/// once it is complete UTF-8; a token that ends inside a multi-byte character yields `None`
/// until the rest arrives. Decoding a window of recent ids (not one id alone) keeps the spacing
/// rules of the tokenizer's decoder.
#[derive(Debug)]
pub struct TextStream<'t> {
    tokenizer: &'t Tokenizer,
    ids: Vec<u32>,
    /// Start of the window decoded for context.
    prefix_offset: usize,
    /// End of the text already emitted.
    read_offset: usize,
}

impl TextStream<'_> {
    /// Adds one generated id; returns the new text, if any is complete.
    pub fn push(&mut self, id: u32) -> Result<Option<String>, ModelError> {
        self.ids.push(id);
        self.emit(false)
    }

    /// Returns whatever is still held back (an incomplete character is emitted as U+FFFD).
    pub fn finish(&mut self) -> Result<Option<String>, ModelError> {
        if self.read_offset >= self.ids.len() {
            return Ok(None);
        }
        self.emit(true)
    }

    fn emit(&mut self, force: bool) -> Result<Option<String>, ModelError> {
        // Every token is at least one byte and a character at most four: more ids held back
        // than that can never complete one (a model emitting stray bytes). Let out all but the
        // last three, which may still begin a character, so that the window stays bounded.
        let text = self.emit_to(self.ids.len(), force)?;
        if text.is_none() && !force && self.ids.len() - self.read_offset > MAX_CHAR_BYTES {
            return self.emit_to(self.ids.len() - (MAX_CHAR_BYTES - 1), true);
        }
        Ok(text)
    }

    /// Emits the text of the ids up to `end`: when it is complete UTF-8, or whatever it is
    /// (incomplete characters as U+FFFD) when `force`.
    fn emit_to(&mut self, end: usize, force: bool) -> Result<Option<String>, ModelError> {
        let prefix = self
            .tokenizer
            .decode(&self.ids[self.prefix_offset..self.read_offset])?;
        let text = self.tokenizer.decode(&self.ids[self.prefix_offset..end])?;
        let complete = !text.ends_with('\u{FFFD}') || force;
        if text.len() > prefix.len() && complete && text.is_char_boundary(prefix.len()) {
            let new = text[prefix.len()..].to_string();
            self.prefix_offset = self.read_offset;
            self.read_offset = end;
            Ok(Some(new))
        } else {
            if force {
                // Nothing printable (ids the decoder skips): move on all the same.
                self.prefix_offset = self.read_offset;
                self.read_offset = end;
            }
            Ok(None)
        }
    }
}
