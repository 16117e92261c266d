use base64::Engine;
use plugin_contract::{ContentBlock, MediaSource, UserContent};

use super::*;
use crate::caller::{Caller, Scope};

/// The smallest PNG: one transparent pixel.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x02, 0x01, 0xa5, 0xdd, 0x8b, 0x1b, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];
const PDF: &[u8] = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n";

async fn files(max_file_bytes: usize, max_message_bytes: usize) -> Files {
    let store = Store::open(":memory:").await.unwrap();
    Files::new(
        store,
        FilesConfig {
            max_file_bytes,
            max_message_bytes,
        },
    )
}

fn tenant(name: &str) -> Caller {
    Caller {
        subject: format!("key_{name}"),
        tenant: Some(name.into()),
        scopes: vec![Scope::ThreadsWrite],
    }
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

fn image(source: MediaSource) -> ContentBlock {
    ContentBlock::Image { source }
}

#[tokio::test]
async fn an_upload_is_checked_against_its_bytes_and_stored_once() {
    let files = files(1 << 20, 1 << 20).await;
    let acme = tenant("acme");
    let first = files.upload(&acme, "image/png", PNG).await.unwrap();
    assert!(first.id.starts_with("file_"), "{}", first.id);
    assert_eq!((first.media_type.as_str(), first.bytes), ("image/png", 70));
    let again = files
        .upload(&acme, "Image/PNG; charset=binary", PNG)
        .await
        .unwrap();
    assert_eq!(again.id, first.id, "the same bytes of one owner: one file");
    let other = files
        .upload(&tenant("globex"), "image/png", PNG)
        .await
        .unwrap();
    assert_ne!(other.id, first.id, "another owner's copy has its own id");

    let refused = files.upload(&acme, "image/jpeg", PNG).await.unwrap_err();
    assert!(
        matches!(&refused, FileError::Mismatch { found: Some(f), .. } if f == "image/png"),
        "{refused}"
    );
    let refused = files
        .upload(&acme, "application/pdf", b"hello")
        .await
        .unwrap_err();
    assert!(
        matches!(refused, FileError::Mismatch { found: None, .. }),
        "{refused}"
    );
    let refused = files.upload(&acme, "text/html", b"<b>").await.unwrap_err();
    assert!(matches!(refused, FileError::Unsupported(_)), "{refused}");
    let small = self::files(10, 1 << 20).await;
    let refused = small.upload(&acme, "image/png", PNG).await.unwrap_err();
    assert!(
        matches!(refused, FileError::TooLarge { limit: 10, .. }),
        "{refused}"
    );
}

#[tokio::test]
async fn a_tenant_sees_only_its_own_files() {
    let files = files(1 << 20, 1 << 20).await;
    let row = files
        .upload(&tenant("acme"), "application/pdf", PDF)
        .await
        .unwrap();
    let (seen, data) = files.download(&tenant("acme"), &row.id).await.unwrap();
    assert_eq!((seen.id.as_str(), data.as_slice()), (row.id.as_str(), PDF));
    assert!(matches!(
        files.download(&tenant("globex"), &row.id).await,
        Err(FileError::NotFound(_))
    ));
    assert!(files.download(&Caller::operator(), &row.id).await.is_ok());
    assert!(matches!(
        files.download(&Caller::operator(), "file_nope").await,
        Err(FileError::NotFound(_))
    ));
}

#[tokio::test]
async fn base64_blocks_become_references_and_resolve_back_to_their_bytes() {
    let files = files(1 << 20, 1 << 20).await;
    let acme = tenant("acme");
    let pdf = files.upload(&acme, "application/pdf", PDF).await.unwrap();
    // Text, an image's bytes, and the PDF uploaded before.
    let sent = || {
        UserContent::Blocks(vec![
            ContentBlock::Text {
                text: "look".into(),
            },
            image(MediaSource::Base64 {
                media_type: "image/png".into(),
                data: b64(PNG),
            }),
            ContentBlock::Document {
                source: MediaSource::File {
                    file_id: pdf.id.clone(),
                    media_type: None,
                    bytes: None,
                },
            },
        ])
    };
    let stored = files.accept(&acme, sent()).await.unwrap();
    let refs: Vec<&MediaSource> = stored.media().collect();
    assert!(
        refs.iter().all(|s| matches!(
            s,
            MediaSource::File {
                bytes: Some(_),
                media_type: Some(_),
                ..
            }
        )),
        "{stored:?}"
    );
    assert!(
        !serde_json::to_string(&stored).unwrap().contains(&b64(PNG)),
        "no bytes kept"
    );
    // The same message again is the same stored content (what idempotency compares).
    let repeat = files.accept(&acme, sent()).await.unwrap();
    assert_eq!(repeat, stored);

    let resolved = files.resolve(stored).await.unwrap();
    assert!(!resolved.unresolved());
    let sources: Vec<(Option<&str>, String)> = resolved
        .media()
        .map(|s| match s {
            MediaSource::Base64 { media_type, data } => (Some(media_type.as_str()), data.clone()),
            MediaSource::File { .. } => (None, String::new()),
        })
        .collect();
    assert_eq!(
        sources,
        [
            (Some("image/png"), b64(PNG)),
            (Some("application/pdf"), b64(PDF))
        ]
    );
    let text = UserContent::from("plain");
    assert_eq!(files.accept(&acme, text.clone()).await.unwrap(), text);
}

#[tokio::test]
async fn bad_media_in_a_message_is_refused_naming_its_block() {
    let files = files(1 << 20, 100).await;
    let acme = tenant("acme");
    let theirs = files
        .upload(&tenant("globex"), "image/png", PNG)
        .await
        .unwrap();
    let cases = [
        (
            image(MediaSource::Base64 {
                media_type: "image/png".into(),
                data: "not base64!".into(),
            }),
            "does not decode",
        ),
        (
            image(MediaSource::File {
                file_id: theirs.id.clone(),
                media_type: None,
                bytes: None,
            }),
            "no file",
        ),
        (
            image(MediaSource::Base64 {
                media_type: "application/pdf".into(),
                data: b64(PDF),
            }),
            "an image block takes an image",
        ),
    ];
    for (block, needle) in cases {
        let err = files
            .accept(&acme, UserContent::Blocks(vec![block]))
            .await
            .unwrap_err();
        assert!(
            matches!(err, FileError::Block { index: 0, .. }) && err.to_string().contains(needle),
            "{err}"
        );
    }
    let two = UserContent::Blocks(vec![
        image(MediaSource::Base64 {
            media_type: "image/png".into(),
            data: b64(PNG),
        }),
        ContentBlock::Document {
            source: MediaSource::Base64 {
                media_type: "application/pdf".into(),
                data: b64(PDF),
            },
        },
    ]);
    let err = files.accept(&acme, two).await.unwrap_err();
    assert!(
        matches!(err, FileError::TooLarge { limit: 100, .. }),
        "70 + 45 bytes pass 100: {err}"
    );
}
