//! Small real files for the tests that send images and documents: a PNG and a PDF whose bytes
//! match their types, and a PNG padded to any size (the daemon never decodes an image; its
//! magic numbers make it one).

use base64::Engine;

/// The smallest PNG: one transparent pixel.
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x02, 0x01, 0xa5, 0xdd, 0x8b, 0x1b, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// A one-page PDF.
pub const PDF: &[u8] = b"%PDF-1.4\n1 0 obj<</Type/Catalog/Pages 2 0 R>>endobj\n\
2 0 obj<</Type/Pages/Kids[3 0 R]/Count 1>>endobj\n\
3 0 obj<</Type/Page/Parent 2 0 R/MediaBox[0 0 200 200]>>endobj\n\
trailer<</Root 1 0 R>>\n%%EOF\n";

/// [`PNG`] followed by `size - PNG.len()` bytes of `fill` (after its end chunk, where readers stop).
pub fn padded_png(size: usize, fill: u8) -> Vec<u8> {
    let mut bytes = PNG.to_vec();
    bytes.resize(size.max(PNG.len()), fill);
    bytes
}

/// Standard base64, as the Messages API's `source.data` has it.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
