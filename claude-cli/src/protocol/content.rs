//! What a user turn says: text, images and documents as Messages API content blocks.
//!
//! [`UserContent`] is either a plain string (the text shortcut, written to the CLI as a string,
//! as before there were blocks) or a list of [`ContentBlock`]s in the Messages API's own shape.
//! The CLI passes blocks on stdin through to the API unchanged (verified against 2.1.330: a
//! `user` line whose `message.content` is `[text, image, document]` reaches `POST /v1/messages`
//! as those blocks, after the CLI's own leading reminders).
//!
//! A [`MediaSource::File`] names bytes the host stored before (`file_…`); the host replaces it with
//! [`MediaSource::Base64`] before the turn is written ([`UserContent::map_sources`]), and
//! [`UserContent::unresolved`] says whether any is left.

use std::borrow::Cow;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// The content of one user message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum UserContent {
    /// Plain text.
    Text(String),
    /// Content blocks, in order.
    Blocks(Vec<ContentBlock>),
}

/// Written by hand: the document says what a message takes, a string that is not blank or at
/// least one block (the derive has no length bounds for an enum's variants).
impl utoipa::PartialSchema for UserContent {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};
        use utoipa::ToSchema as _;
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .min_length(Some(1))
                    .pattern(Some(r"\S"))
                    .description(Some("Plain text, not blank.")),
            )
            .item(
                ArrayBuilder::new()
                    .items(utoipa::openapi::Ref::from_schema_name(ContentBlock::name()))
                    .min_items(Some(1))
                    .description(Some("Content blocks, in order.")),
            )
            .into()
    }
}

impl utoipa::ToSchema for UserContent {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        use utoipa::PartialSchema as _;
        schemas.push((ContentBlock::name().into(), ContentBlock::schema()));
        <ContentBlock as utoipa::ToSchema>::schemas(schemas);
    }
}

/// One content block of a user message.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    Text { text: String },
    Image { source: MediaSource },
    Document { source: MediaSource },
}

/// Where an image's or a document's bytes are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum MediaSource {
    /// The bytes themselves, base64 (standard alphabet, padded).
    Base64 { media_type: String, data: String },
    /// A file the host stored before, by its id. `media_type` and `bytes` describe it when the
    /// host says (they are ignored on input).
    File {
        #[serde(rename = "fileId", alias = "file_id")]
        file_id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        media_type: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bytes: Option<u64>,
    },
}

/// A string, or a list of blocks; an error names the block at fault (`content block 2: unknown
/// variant `audio`…`), not only "no variant matched".
impl<'de> Deserialize<'de> for UserContent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Value::deserialize(deserializer)? {
            Value::String(text) => Ok(UserContent::Text(text)),
            Value::Array(items) => items
                .into_iter()
                .enumerate()
                .map(|(index, item)| {
                    ContentBlock::deserialize(item)
                        .map_err(|err| D::Error::custom(format!("content block {index}: {err}")))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(UserContent::Blocks),
            _ => Err(D::Error::custom(
                "content must be a string or a list of content blocks",
            )),
        }
    }
}

impl From<String> for UserContent {
    fn from(text: String) -> Self {
        UserContent::Text(text)
    }
}

impl From<&str> for UserContent {
    fn from(text: &str) -> Self {
        UserContent::Text(text.to_owned())
    }
}

impl UserContent {
    /// The text of the message: the string, or the text blocks joined by a blank line.
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            UserContent::Text(text) => Cow::Borrowed(text),
            UserContent::Blocks(blocks) => {
                let texts: Vec<&str> = blocks
                    .iter()
                    .filter_map(|block| match block {
                        ContentBlock::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                match texts.as_slice() {
                    [one] => Cow::Borrowed(one),
                    _ => Cow::Owned(texts.join("\n\n")),
                }
            }
        }
    }

    /// The blocks, a string being one text block.
    pub fn blocks(&self) -> Cow<'_, [ContentBlock]> {
        match self {
            UserContent::Text(text) => Cow::Owned(vec![ContentBlock::Text { text: text.clone() }]),
            UserContent::Blocks(blocks) => Cow::Borrowed(blocks),
        }
    }

    /// Into blocks, a string being one text block.
    pub fn into_blocks(self) -> Vec<ContentBlock> {
        match self {
            UserContent::Text(text) => vec![ContentBlock::Text { text }],
            UserContent::Blocks(blocks) => blocks,
        }
    }

    /// The images' and documents' sources, in order.
    pub fn media(&self) -> impl Iterator<Item = &MediaSource> {
        let blocks: &[ContentBlock] = match self {
            UserContent::Text(_) => &[],
            UserContent::Blocks(blocks) => blocks,
        };
        blocks.iter().filter_map(ContentBlock::source)
    }

    /// Whether it carries an image or a document.
    pub fn has_media(&self) -> bool {
        self.media().next().is_some()
    }

    /// Neither text (other than whitespace) nor media.
    pub fn is_blank(&self) -> bool {
        !self.has_media() && self.text().trim().is_empty()
    }

    /// The ids of the stored files it names, in order.
    pub fn file_ids(&self) -> Vec<String> {
        self.media()
            .filter_map(|source| match source {
                MediaSource::File { file_id, .. } => Some(file_id.clone()),
                MediaSource::Base64 { .. } => None,
            })
            .collect()
    }

    /// Whether a [`MediaSource::File`] is left, which must not be written to the CLI.
    pub fn unresolved(&self) -> bool {
        self.media()
            .any(|source| matches!(source, MediaSource::File { .. }))
    }

    /// `lead` blocks first, then these: a plain text stays a string when `lead` is empty.
    pub fn after(self, lead: Vec<ContentBlock>) -> UserContent {
        if lead.is_empty() {
            return self;
        }
        let mut blocks = lead;
        blocks.extend(self.into_blocks());
        UserContent::Blocks(blocks)
    }

    /// Every media source replaced by `f`'s answer, in order; the first error stops it.
    pub fn map_sources<E>(
        self,
        mut f: impl FnMut(MediaSource) -> Result<MediaSource, E>,
    ) -> Result<UserContent, E> {
        match self {
            UserContent::Text(_) => Ok(self),
            UserContent::Blocks(blocks) => blocks
                .into_iter()
                .map(|block| {
                    Ok(match block {
                        ContentBlock::Text { text } => ContentBlock::Text { text },
                        ContentBlock::Image { source } => {
                            ContentBlock::Image { source: f(source)? }
                        }
                        ContentBlock::Document { source } => {
                            ContentBlock::Document { source: f(source)? }
                        }
                    })
                })
                .collect::<Result<Vec<_>, E>>()
                .map(UserContent::Blocks),
        }
    }
}

impl ContentBlock {
    /// The image's or document's source; `None` for text.
    pub fn source(&self) -> Option<&MediaSource> {
        match self {
            ContentBlock::Text { .. } => None,
            ContentBlock::Image { source } | ContentBlock::Document { source } => Some(source),
        }
    }
}

impl MediaSource {
    /// The media type, when known.
    pub fn media_type(&self) -> Option<&str> {
        match self {
            MediaSource::Base64 { media_type, .. } => Some(media_type),
            MediaSource::File { media_type, .. } => media_type.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_string_and_blocks_both_parse_and_write_back_as_they_came() {
        let text: UserContent = serde_json::from_value(json!("hi")).unwrap();
        assert_eq!(text, UserContent::Text("hi".into()));
        assert_eq!(serde_json::to_value(&text).unwrap(), json!("hi"));
        let blocks = json!([
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
            {"type": "document", "source": {"type": "file", "fileId": "file_1"}},
        ]);
        let content: UserContent = serde_json::from_value(blocks.clone()).unwrap();
        assert_eq!(serde_json::to_value(&content).unwrap(), blocks);
        assert_eq!(content.text(), "look");
        assert!(content.unresolved());
        let snake: UserContent = serde_json::from_value(
            json!([{"type": "image", "source": {"type": "file", "file_id": "file_2"}}]),
        )
        .unwrap();
        assert_eq!(snake.media().count(), 1);
    }

    #[test]
    fn unknown_block_and_source_types_are_refused() {
        for bad in [
            json!([{"type": "audio", "source": {"type": "base64", "media_type": "a", "data": ""}}]),
            json!([{"type": "image", "source": {"type": "url", "url": "http://x"}}]),
            json!([{"type": "image"}]),
            json!(7),
        ] {
            assert!(
                serde_json::from_value::<UserContent>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        let err = serde_json::from_value::<UserContent>(json!([
            {"type": "text", "text": "a"},
            {"type": "audio"},
        ]))
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("content block 1: unknown variant `audio`"),
            "{err}"
        );
    }

    #[test]
    fn lead_blocks_go_first_and_sources_map_in_order() {
        let content = UserContent::Blocks(vec![
            ContentBlock::Text { text: "a".into() },
            ContentBlock::Image {
                source: MediaSource::File {
                    file_id: "file_1".into(),
                    media_type: None,
                    bytes: None,
                },
            },
        ]);
        let led = content.after(vec![ContentBlock::Text { text: "ctx".into() }]);
        assert_eq!(led.text(), "ctx\n\na");
        let resolved = led
            .map_sources(|source| match source {
                MediaSource::File { file_id, .. } => Ok::<_, ()>(MediaSource::Base64 {
                    media_type: "image/png".into(),
                    data: file_id,
                }),
                other => Ok(other),
            })
            .unwrap();
        assert!(!resolved.unresolved());
        assert_eq!(
            resolved.media().next().unwrap().media_type(),
            Some("image/png")
        );
        let plain = UserContent::from("x").after(Vec::new());
        assert_eq!(plain, UserContent::Text("x".into()));
        assert!(UserContent::from("  ").is_blank());
    }
}
