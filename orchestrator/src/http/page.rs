//! The web page for people: `GET /` and its assets, embedded in the binary (`orchestrator/web/`),
//! so the daemon serves it with no Node, npm or network at run time. No build step: the files
//! are the source.
//!
//! The page holds no data, so it needs no token; it asks the person for one when the API answers
//! 401 and sends it as a bearer header. Every answer carries a strict `Content-Security-Policy`:
//! scripts and styles only from this origin (none inline), requests only to this origin, no
//! frames, no plugins, no form posts. Model output is untrusted: the page renders Markdown by
//! building DOM nodes with `textContent` only from markdown-it's tokens (`web/markdown.js`), and the policy is the second
//! wall should that ever slip.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{ApiError, ApiPath};

/// The page's policy: everything from this origin only, nothing inline, nothing framed.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data: blob:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const INDEX: Asset = Asset {
    name: "index.html",
    content_type: "text/html; charset=utf-8",
    body: include_str!("../../web/index.html"),
};

/// The files under `/assets/`; the page names them, nothing else is served.
const ASSETS: &[Asset] = &[
    Asset {
        name: "consent.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/consent.js"),
    },
    Asset {
        name: "app.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/app.js"),
    },
    Asset {
        name: "api.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/api.js"),
    },
    Asset {
        name: "pool.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/pool.js"),
    },
    Asset {
        name: "automation.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/automation.js"),
    },
    Asset {
        name: "workspace.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/workspace.js"),
    },
    Asset {
        name: "threadlist.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/threadlist.js"),
    },
    Asset {
        name: "permissions.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/permissions.js"),
    },
    Asset {
        name: "attachments.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/attachments.js"),
    },
    Asset {
        name: "markdown.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/markdown.js"),
    },
    Asset {
        // markdown-it 15.0.3, vendored (web/vendor/README.md).
        name: "markdown-it.js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("../../web/vendor/markdown-it.js"),
    },
    Asset {
        name: "style.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("../../web/style.css"),
    },
];

/// `GET /`: the page.
#[utoipa::path(get, path = "/", operation_id = "page", tag = "service",
    responses((status = 200, description = "The web page (HTML). No token needed: the page asks for one.",
               content_type = "text/html", body = String)))]
pub async fn index() -> Response {
    serve(&INDEX)
}

/// `GET /assets/{name}`: a script or style sheet of the page; 404 for any other name.
#[utoipa::path(get, path = "/assets/{name}", operation_id = "pageAsset", tag = "service",
    params(("name" = String, Path, description = "A script or style sheet the page names (`app.js`, `markdown.js`, `markdown-it.js`, `style.css`, …).")),
    responses(
        (status = 200, description = "The file.", content(
            (String = "text/javascript"),
            (String = "text/css"),
        )),
        (status = 404, description = "No such asset.", body = super::error::ErrorBody),
    ))]
pub async fn asset(ApiPath(name): ApiPath<String>) -> Result<Response, ApiError> {
    ASSETS
        .iter()
        .find(|asset| asset.name == name)
        .map(serve)
        .ok_or_else(|| ApiError::not_found(format!("no asset named {name:?}")))
}

fn serve(asset: &Asset) -> Response {
    let mut response = (StatusCode::OK, asset.body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(asset.content_type),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The assets change with the binary; a browser asks again rather than run a stale script.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_only_embedded_assets_and_has_no_inline_script() {
        for name in ["app.js", "markdown.js", "style.css"] {
            assert!(ASSETS.iter().any(|a| a.name == name), "{name}");
        }
        let html = INDEX.body;
        assert!(html.contains(r#"src="/assets/app.js""#));
        assert!(html.contains(r#"href="/assets/style.css""#));
        // Every <script> has a src (the policy would block an inline one anyway).
        for tag in html.split("<script").skip(1) {
            let open = tag.split('>').next().unwrap_or("");
            assert!(open.contains("src="), "inline script: <script{open}>");
        }
        assert!(!html.contains("style="), "no inline styles");
        let app = ASSETS.iter().find(|a| a.name == "app.js").unwrap().body;
        assert!(app.contains("'./markdown.js'"));
        for asset in ASSETS {
            for forbidden in ["innerHTML", "outerHTML", "insertAdjacentHTML", "eval("] {
                assert!(
                    !asset.body.contains(forbidden),
                    "{} uses {forbidden}: model output must only reach the DOM as text",
                    asset.name
                );
            }
        }
    }
}
