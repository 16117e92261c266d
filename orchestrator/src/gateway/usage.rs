//! What a model request used and cost: read from the response as it passes ([`Scanner`]) and
//! priced by model ([`Prices`]).
//!
//! A streamed response states its usage twice: `message_start` (input and cache tokens, the
//! model) and `message_delta` (the output tokens so far, and on newer APIs the input figures
//! again). The scanner reads each chunk in place and parses only the `data:` lines of those two
//! events; what it copies is the unfinished line at a chunk's end. A plain JSON response (no
//! `stream`) is kept until it ends, up to [`JSON_LIMIT`], and its `usage` read then.

use std::collections::BTreeMap;

use claude_cli::ApiUsage;
use serde::Deserialize;
use serde_json::Value;

use crate::config::Price;

/// The most of a non-streamed response kept to read its usage.
const JSON_LIMIT: usize = 8 << 20;

/// The longest line of a stream kept across chunks.
const LINE_LIMIT: usize = 1 << 20;

const fn price(input: f64, output: f64, cache_write: f64, cache_read: f64) -> Price {
    Price {
        input,
        output,
        cache_write,
        cache_read,
    }
}

/// First-party prices (USD per million tokens) by model name prefix, as the model catalog of
/// `claude` 2.1.332 has them (the same as 2.1.330's; its long-prompt tiers aside).
const BUILT_IN: &[(&str, Price)] = &[
    ("claude-3-5-haiku", price(0.8, 4.0, 1.0, 0.08)),
    ("claude-3-5-sonnet", price(3.0, 15.0, 3.75, 0.3)),
    ("claude-3-7-sonnet", price(3.0, 15.0, 3.75, 0.3)),
    ("claude-haiku-4-5", price(1.0, 5.0, 1.25, 0.1)),
    ("claude-haiku-5-5", price(0.1, 0.5, 0.125, 0.01)),
    ("claude-sonnet-4", price(3.0, 15.0, 3.75, 0.3)),
    ("claude-sonnet-5", price(2.0, 10.0, 2.5, 0.2)),
    ("claude-sonnet-5-5", price(2.0, 10.0, 2.5, 0.1)),
    ("claude-opus-4", price(15.0, 75.0, 18.75, 1.5)),
    ("claude-opus-4-5", price(5.0, 25.0, 6.25, 0.5)),
    ("claude-opus-4-6", price(5.0, 25.0, 6.25, 0.5)),
    ("claude-opus-4-7", price(5.0, 25.0, 6.25, 0.5)),
    ("claude-opus-4-8", price(5.0, 25.0, 6.25, 0.5)),
    ("claude-opus-5", price(5.0, 25.0, 6.25, 0.5)),
    ("claude-opus-5-5", price(4.0, 20.0, 5.0, 0.2)),
    ("claude-fable-5", price(10.0, 50.0, 12.5, 1.0)),
    ("claude-fable-5-1", price(10.0, 50.0, 12.5, 0.25)),
    ("claude-fable-5-2", price(8.0, 40.0, 10.0, 0.2)),
    ("claude-mythos-5", price(10.0, 50.0, 12.5, 1.0)),
    ("claude-mythos-5-1", price(10.0, 50.0, 12.5, 0.25)),
    ("claude-mythos-5-2", price(8.0, 40.0, 10.0, 0.2)),
];

/// What the CLI charges for a model it has no price of; so does the gateway.
const FALLBACK: Price = price(5.0, 25.0, 6.25, 0.5);

/// Prices by model name prefix, the longest matching prefix first.
#[derive(Clone, Debug)]
pub struct Prices(Vec<(String, Price)>);

/// The built-in prices with `overrides` (`gateway.prices`) over them.
pub fn prices(overrides: &BTreeMap<String, Price>) -> Prices {
    let mut rows: BTreeMap<String, Price> = BUILT_IN
        .iter()
        .map(|(prefix, price)| ((*prefix).to_owned(), *price))
        .collect();
    rows.extend(overrides.iter().map(|(k, v)| (k.clone(), *v)));
    let mut rows: Vec<(String, Price)> = rows.into_iter().collect();
    rows.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
    Prices(rows)
}

impl Prices {
    /// What `model`'s tokens cost; [`FALLBACK`] for a model no prefix matches, or none.
    pub fn of(&self, model: Option<&str>) -> Price {
        model
            .and_then(|model| {
                self.0
                    .iter()
                    .find(|(prefix, _)| model.starts_with(prefix.as_str()))
            })
            .map_or(FALLBACK, |(_, price)| *price)
    }
}

/// The bytes of a prompt counted as one token, for an estimate: English runs about 4 a token.
const BYTES_PER_TOKEN: usize = 4;

/// The output a request is estimated at when it names no `max_tokens` (the API requires it).
const DEFAULT_MAX_TOKENS: u64 = 4096;

/// What a `POST /v1/messages` asks for, read once from its body: its model and its
/// `max_tokens`, and how large it is. A body that is not a request asks for nothing.
#[derive(Debug, Default, Deserialize)]
pub struct Asked {
    pub model: Option<String>,
    max_tokens: Option<u64>,
    #[serde(skip)]
    bytes: usize,
}

impl Asked {
    pub fn of(body: &[u8]) -> Asked {
        let mut asked: Asked = serde_json::from_slice(body).unwrap_or_default();
        asked.bytes = body.len();
        asked
    }

    /// What the request is expected to cost at most, for the budgets to hold while it is in
    /// flight: its whole body as prompt (about [`BYTES_PER_TOKEN`] a token) and its
    /// `max_tokens` as output, at its model's prices.
    pub fn estimate(&self, prices: &Prices) -> f64 {
        let used = Used {
            input: (self.bytes / BYTES_PER_TOKEN) as u64,
            output: self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            ..Used::default()
        };
        used.cost(prices.of(self.model.as_deref()))
    }
}

/// What one response says it used.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Used {
    /// The response's id (`msg_…`), which the CLI's `assistant` lines name.
    pub id: Option<String>,
    pub model: Option<String>,
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl Used {
    /// Its cost at `price`.
    pub fn cost(&self, price: Price) -> f64 {
        let tokens = |n: u64| n as f64 / 1_000_000.0;
        tokens(self.input) * price.input
            + tokens(self.output) * price.output
            + tokens(self.cache_write) * price.cache_write
            + tokens(self.cache_read) * price.cache_read
    }

    /// The tokens in the CLI's terms.
    pub fn api_usage(&self) -> ApiUsage {
        ApiUsage {
            input_tokens: self.input,
            output_tokens: self.output,
            cache_read_input_tokens: self.cache_read,
            cache_creation_input_tokens: self.cache_write,
        }
    }

    /// The tokens by kind, as the metrics label them.
    pub fn by_kind(&self) -> [(&'static str, u64); 4] {
        [
            ("input", self.input),
            ("output", self.output),
            ("cache_read", self.cache_read),
            ("cache_write", self.cache_write),
        ]
    }

    /// Takes the figures `usage` holds (an API `usage` object); the others stay.
    fn read(&mut self, usage: &Value) {
        let set = |field: &mut u64, name: &str| {
            if let Some(n) = usage.get(name).and_then(Value::as_u64) {
                *field = n;
            }
        };
        set(&mut self.input, "input_tokens");
        set(&mut self.output, "output_tokens");
        set(&mut self.cache_read, "cache_read_input_tokens");
        set(&mut self.cache_write, "cache_creation_input_tokens");
    }
}

/// Reads a response's usage from its chunks as they pass.
#[derive(Debug)]
pub struct Scanner {
    stream: bool,
    /// A stream's unfinished last line; a JSON body so far.
    kept: Vec<u8>,
    /// `kept` outgrew its limit: what it held is dropped.
    over: bool,
    used: Used,
}

impl Scanner {
    /// For a `text/event-stream` body (`stream`) or a JSON one.
    pub fn new(stream: bool) -> Scanner {
        Scanner {
            stream,
            kept: Vec::new(),
            over: false,
            used: Used::default(),
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        if !self.stream {
            if self.kept.len() + chunk.len() <= JSON_LIMIT {
                self.kept.extend_from_slice(chunk);
            } else {
                self.over = true;
            }
            return;
        }
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let line = &rest[..end];
            rest = &rest[end + 1..];
            if self.kept.is_empty() && !self.over {
                self.line(line);
            } else {
                let mut kept = std::mem::take(&mut self.kept);
                kept.extend_from_slice(line);
                if !std::mem::take(&mut self.over) {
                    self.line(&kept);
                }
                kept.clear();
                self.kept = kept;
            }
        }
        if self.kept.len() + rest.len() <= LINE_LIMIT {
            self.kept.extend_from_slice(rest);
        } else {
            self.kept.clear();
            self.over = true;
        }
    }

    /// What the response said it used, once it is over.
    pub fn finish(mut self) -> Used {
        if self.stream {
            let last = std::mem::take(&mut self.kept);
            if !self.over {
                self.line(&last);
            }
        } else if !self.over {
            if let Ok(body) = serde_json::from_slice::<Value>(&self.kept) {
                self.used.id = body["id"].as_str().map(str::to_owned);
                self.used.model = body["model"].as_str().map(str::to_owned);
                self.used.read(&body["usage"]);
            }
        }
        self.used
    }

    /// One line of the stream: only the data of `message_start` and `message_delta` is read.
    fn line(&mut self, line: &[u8]) {
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let wanted = |needle: &[u8]| data.windows(needle.len()).any(|w| w == needle);
        if !wanted(b"\"message_start\"") && !wanted(b"\"message_delta\"") {
            return;
        }
        let Ok(event) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        match event["type"].as_str() {
            Some("message_start") => {
                let message = &event["message"];
                if let Some(id) = message["id"].as_str() {
                    self.used.id = Some(id.to_owned());
                }
                if let Some(model) = message["model"].as_str() {
                    self.used.model = Some(model.to_owned());
                }
                self.used.read(&message["usage"]);
            }
            Some("message_delta") => self.used.read(&event["usage"]),
            _ => {}
        }
    }
}
