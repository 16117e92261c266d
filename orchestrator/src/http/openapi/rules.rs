//! What the handlers check of a request that the request types' own annotations cannot carry,
//! stated in the served document (as JSON, once the document is built): bounds that come from
//! the config (`max_message_chars`, `workspaces.roots`, the profiles: their names, permission
//! modes and MCP servers), rules across fields (`oneOf`, `anyOf`, `contains`), closed lists too long for an
//! annotation (IANA time zones), and the body of `/mcp` (JSON-RPC, rmcp's to read).
//!
//! Each rule names the check it states. What no schema can state (that a thread, file or path
//! exists, that a cron ever fires, that bytes are of their media type) is said in the
//! description; the e2e test `openapi` lists those refusals one by one.
//!
//! A rule replaces the schema of a field whole, annotations and all: `UserContent` (written by
//! hand in `claude-cli` for what the CLI takes) becomes what the daemon takes.

use serde_json::{json, Map, Value};

use crate::api::doc::{BASE64, MESSAGE_TEXT, MESSAGE_TEXT_NOT_BLANK, NOT_BLANK};
use crate::config::Config;
use crate::pool::Pool;

/// The permission modes a caller may name, narrowest first (`launch::AgentProfile::refuses_mode`
/// ranks them).
const MODES: [&str; 5] = [
    "plan",
    "dontAsk",
    "default",
    "acceptEdits",
    "bypassPermissions",
];

/// What the daemon's profiles let a request name, across all of them (a thread's own profile
/// may allow less: its description says so).
struct Profiles {
    names: Vec<String>,
    modes: Vec<&'static str>,
    mcp_servers: Vec<String>,
}

impl Profiles {
    fn of(pool: &Pool) -> Profiles {
        let infos = pool.profiles();
        let agents: Vec<_> = infos
            .iter()
            .filter_map(|info| pool.profile(Some(&info.name)).ok())
            .collect();
        let modes = MODES
            .into_iter()
            .filter(|mode| agents.iter().any(|a| a.refuses_mode(mode).is_none()))
            .collect();
        let mut mcp_servers: Vec<String> = infos
            .iter()
            .flat_map(|info| info.mcp_servers.iter().map(|s| s.name.clone()))
            .collect();
        mcp_servers.sort();
        mcp_servers.dedup();
        Profiles {
            names: infos.into_iter().map(|info| info.name).collect(),
            modes,
            mcp_servers,
        }
    }
}

/// A schema in `components.schemas`.
fn schema(name: &str) -> String {
    format!("/components/schemas/{name}")
}

/// The rules applied to `doc`; the pointers that named nothing (a schema renamed without its
/// rule), for the caller to report.
pub(super) fn apply(doc: &mut Value, config: &Config, pool: &Pool) -> Vec<String> {
    let profiles = Profiles::of(pool);
    let components = [
        (schema(JSON_RPC), json_rpc()),
        (schema(TIME_ZONE), time_zones()),
        (
            "/paths/~1mcp/post/requestBody/content/application~1json/schema".to_owned(),
            json!({"$ref": format!("#/components/schemas/{JSON_RPC}")}),
        ),
    ];
    message(config, &profiles)
        .into_iter()
        .chain(threads(config, &profiles))
        .chain(schedules(config))
        .chain(answers())
        .chain(components)
        .filter_map(|(pointer, value)| (!put(doc, &pointer, value)).then_some(pointer))
        .collect()
}

/// Sets the member `pointer` names (adding it when its object lacks it); false when the object
/// is not there.
fn put(doc: &mut Value, pointer: &str, value: Value) -> bool {
    let Some((parent, key)) = pointer.rsplit_once('/') else {
        return false;
    };
    let key = key.replace("~1", "/").replace("~0", "~");
    match doc.pointer_mut(parent).and_then(Value::as_object_mut) {
        Some(object) => {
            object.insert(key, value);
            true
        }
        None => false,
    }
}

/// `POST /api/threads/{id}/messages`: `pipeline::validate_content` (not blank, no control
/// character, `max_message_chars`), `files::Files::accept` (media types, base64, an image
/// block for an image and a document block for a PDF), and the profiles' permission modes and
/// MCP servers.
fn message(config: &Config, profiles: &Profiles) -> Vec<(String, Value)> {
    let max = config.max_message_chars;
    let text = json!({
        "type": "string", "minLength": 1, "maxLength": max, "pattern": MESSAGE_TEXT_NOT_BLANK,
        "description": "Plain text: not blank, no control character but tab, line feed and \
                        carriage return, at most `max_message_chars` characters.",
    });
    let source = |kind: &str, media_types: &[&str]| {
        json!({"type": "object", "required": ["type", "source"], "additionalProperties": false,
               "properties": {"type": {"enum": [kind]}, "source": {"oneOf": [
            {"type": "object", "required": ["type", "media_type", "data"],
             "additionalProperties": false, "properties": {
                "type": {"enum": ["base64"]}, "media_type": {"enum": media_types},
                "data": {"type": "string", "pattern": BASE64, "contentEncoding": "base64",
                         "description": "The bytes, of the type `media_type` names (their \
                                         magic numbers are checked)."}}},
            {"type": "object", "required": ["type", "fileId"], "additionalProperties": false,
             "properties": {"type": {"enum": ["file"]}, "media_type": {"type": "string"},
                "fileId": {"type": "string", "description": "A file uploaded before \
                           (`POST /api/files`) that the caller sees (`invalid_content` \
                           otherwise)."}}},
        ]}}})
    };
    let block = json!({"oneOf": [
        {"type": "object", "required": ["type", "text"], "additionalProperties": false,
         "properties": {"type": {"enum": ["text"]},
            "text": {"type": "string", "maxLength": max, "pattern": MESSAGE_TEXT}}},
        source("image", &["image/png", "image/jpeg", "image/gif", "image/webp"]),
        source("document", &["application/pdf"]),
    ]});
    // Not blank: a block of media, or a text block that is not blank.
    let something = json!({"anyOf": [
        {"properties": {"type": {"enum": ["image", "document"]}}, "required": ["type"]},
        {"properties": {"type": {"enum": ["text"]}, "text": {"pattern": NOT_BLANK}},
         "required": ["type", "text"]},
    ]});
    let blocks = json!({
        "type": "array", "minItems": 1, "items": block, "contains": something,
        "description": "Content blocks, in order: at least one image, document or text that \
                        is not blank; the text blocks together at most `max_message_chars` \
                        characters.",
    });
    let post = schema("PostMessage");
    let servers = &profiles.mcp_servers;
    let mut modes: Vec<Value> = profiles.modes.iter().map(|m| json!(m)).collect();
    modes.push(Value::Null);
    vec![
        (
            format!("{post}/properties/permissionMode"),
            json!({"enum": modes, "description": "This turn's permission mode, no wider than \
                   the thread's profile's own (`plan` and `dontAsk` < `default` < `acceptEdits` \
                   < `bypassPermissions`)."}),
        ),
        (
            schema("UserContent"),
            json!({"oneOf": [text, blocks], "description": CONTENT}),
        ),
        if servers.is_empty() {
            // No profile has one: only an empty list (or none) names no unknown server.
            (format!("{post}/properties/mcpServers/maxItems"), json!(0))
        } else {
            (
                format!("{post}/properties/mcpServers/items"),
                json!({"enum": servers}),
            )
        },
    ]
}

const CONTENT: &str = "The message: a string, or a list of content blocks in the Messages \
    API's shape: `text`, and `image` or `document` whose `source` is `{\"type\": \"base64\", \
    \"media_type\", \"data\"}` or a file uploaded before, `{\"type\": \"file\", \"fileId\": \
    \"file_…\"}`. Images are PNG, JPEG, GIF or WebP; documents PDF.";

/// `POST /api/threads` and a schedule's thread: a `profile` the config has
/// (`pipeline::create_thread`), an `outputSchema` whose root is an object schema
/// (`mcp::schema::OutputSchema::compile`), and no `workspace` while `workspaces.roots` is
/// empty (`workspace::Workspaces::plan`).
fn threads(config: &Config, profiles: &Profiles) -> Vec<(String, Value)> {
    let mut names: Vec<Value> = profiles.names.iter().map(|n| json!(n)).collect();
    names.push(Value::Null);
    let profile = json!({"enum": names, "description": "The kind of agent (`GET \
        /api/profiles`); default: the daemon's default profile."});
    let workspace = if config.workspaces.roots.is_empty() {
        json!({"type": "null", "description": "Workspaces are off on this daemon \
               (`workspaces.roots` is empty): none may be asked for."})
    } else {
        json!({"oneOf": [{"$ref": "#/components/schemas/WorkspaceRequest"}, {"type": "null"}],
               "description": "Where the thread works: `{\"path\": \"/abs/dir\"}`, or a \
               worktree made for it: `{\"repo\": \"/abs/repo\", \"worktree\": true, \
               \"baseRef\"?, \"branch\"?}`: an existing folder or repository under \
               `workspaces.roots`, a `baseRef` it has, a `branch` git takes and it has not. \
               Default: a folder of its own."})
    };
    let output = json!({
        "type": ["object", "null"], "required": ["type"],
        "properties": {"type": {"enum": ["object"]}},
        "description": "A JSON Schema (draft 2020-12) every reply must match: `--json-schema`. \
            Its root is an object schema (`\"type\": \"object\"`); it must compile, and the CLI \
            must be able to run it (no unknown keyword, ECMAScript patterns, no `$ref` cycle, \
            at most 64 KiB, 32 levels and 2,000 subschemas).",
    });
    let (create, template) = (schema("CreateThread"), schema("ThreadTemplate"));
    vec![
        (format!("{create}/properties/profile"), profile.clone()),
        (format!("{create}/properties/workspace"), workspace.clone()),
        (format!("{create}/properties/outputSchema"), output),
        (format!("{template}/properties/profile"), profile),
        (format!("{template}/properties/workspace"), workspace),
    ]
}

/// The name of the IANA time zones' schema.
const TIME_ZONE: &str = "TimeZone";

/// Every name `chrono_tz` parses: what `schedules::cron::Cron::parse` takes.
fn time_zones() -> Value {
    let names: Vec<&str> = chrono_tz::TZ_VARIANTS.iter().map(|tz| tz.name()).collect();
    json!({"type": "string", "enum": names, "description": "An IANA time zone."})
}

/// A cron's shape, as `croner` reads it before it looks at values: an alias, or five fields
/// (six with seconds first) each of the characters its position takes: `L` `W` `?` in the day
/// of the month, `L` `#` `?` and weekday names in the day of the week, month names in the month.
pub(super) fn cron_pattern() -> String {
    let any_case = |words: &[&str]| -> String {
        let words: Vec<String> = words
            .iter()
            .map(|word| {
                word.chars()
                    .map(|c| format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase()))
                    .collect()
            })
            .collect();
        words.join("|")
    };
    let aliases = any_case(&["yearly", "annually", "monthly", "weekly", "daily", "hourly"]);
    let months = any_case(&[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ]);
    let weekdays = any_case(&["sun", "mon", "tue", "wed", "thu", "fri", "sat"]);
    let time = r"[0-9*/,-]+".to_owned();
    let day = r"[0-9*/,LlWw?-]+".to_owned();
    let month = format!(r"(?:[0-9*/,-]|{months})+");
    let weekday = format!(r"(?:[0-9*/,#?Ll-]|{weekdays})+");
    let gap = r"[ \t]+";
    let five = [time.as_str(), &time, &day, &month, &weekday].join(gap);
    format!(r"^[ \t]*(?:@(?:{aliases})|(?:{time}{gap})?{five})[ \t]*$")
}

/// `POST` and `PATCH /api/schedules…`: `schedules::cron::Cron::parse` (at most
/// `MAX_CRON_CHARS`, [`cron_pattern`], a known time zone),
/// `http::schedules::check_prompt` (not blank, `max_message_chars`), and exactly one of
/// `threadId` and `thread`.
fn schedules(config: &Config) -> Vec<(String, Value)> {
    let cron = json!({
        "type": "string", "minLength": 1, "maxLength": crate::schedules::cron::MAX_CRON_CHARS,
        "pattern": cron_pattern(),
        "description": "Five fields (`*/5 * * * *`), or six with seconds first (`*/2 * * * * \
            *`); names, ranges, steps, `L`, `#`, `W` and `@daily`-style aliases. Each field's \
            values are the cron parser's to check, and the schedule must fire again.",
    });
    let timezone = json!({"oneOf": [{"$ref": format!("#/components/schemas/{TIME_ZONE}")},
        {"type": "null"}], "description": "An IANA time zone; default `UTC`."});
    let prompt = |nullable: bool| {
        json!({"type": if nullable { json!(["string", "null"]) } else { json!("string") },
               "minLength": 1, "maxLength": config.max_message_chars, "pattern": NOT_BLANK,
               "description": "The message each run sends: not blank, at most \
                               `max_message_chars` characters."})
    };
    // `threadId` a string or `thread` an object, not both: each branch names one.
    let one_target = json!([
        {"required": ["threadId"], "properties": {"threadId": {"type": "string"}}},
        {"required": ["thread"], "properties": {"thread": {"type": "object"}}},
    ]);
    let (create, patch) = (schema("CreateSchedule"), schema("PatchSchedule"));
    let mut rules = vec![(format!("{create}/oneOf"), one_target)];
    for (body, nullable) in [(&create, false), (&patch, true)] {
        let mut cron = cron.clone();
        if nullable {
            cron["type"] = json!(["string", "null"]);
        }
        rules.push((format!("{body}/properties/cron"), cron));
        rules.push((format!("{body}/properties/timezone"), timezone.clone()));
        rules.push((format!("{body}/properties/prompt"), prompt(nullable)));
    }
    rules
}

/// `POST …/permissions/{request_id}`: `updatedInput` only with `"decision": "allow"`, and
/// `"always": true` only with `"decision": "allow"` and no `updatedInput`
/// (`http::permissions::answer`).
fn answers() -> Vec<(String, Value)> {
    let allow = json!({"enum": ["allow"]});
    let no_input = json!({"type": "null"});
    vec![(
        format!("{}/allOf", schema("AnswerBody")),
        json!([
            {"anyOf": [
                {"properties": {"decision": allow}},
                {"properties": {"updatedInput": no_input}},
            ]},
            {"anyOf": [
                {"properties": {"always": {"enum": [false]}}},
                {"properties": {"decision": allow, "updatedInput": no_input}},
            ]},
        ]),
    )]
}

/// The name of `/mcp`'s body schema.
const JSON_RPC: &str = "JsonRpcMessage";

/// What `/mcp` takes: a JSON-RPC 2.0 request or notification (no response: the server is
/// stateless and asks nothing), `params` an object whose `_meta` is an object. A method it does
/// not know, or params a method refuses, is a JSON-RPC error in a `200`, not a refusal.
fn json_rpc() -> Value {
    let params = json!({"type": "object", "properties": {"_meta": {"type": "object"}}});
    let id = json!({"oneOf": [{"type": "string"},
        {"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX}]});
    let mut request = Map::new();
    request.insert("jsonrpc".into(), json!({"enum": ["2.0"]}));
    request.insert("method".into(), json!({"type": "string"}));
    request.insert("params".into(), params);
    let notification = request.clone();
    request.insert("id".into(), id);
    json!({"oneOf": [
        {"title": "Request", "type": "object", "required": ["jsonrpc", "id", "method"],
         "additionalProperties": false, "properties": request},
        {"title": "Notification", "type": "object", "required": ["jsonrpc", "method"],
         "additionalProperties": false, "properties": notification},
    ], "description": "A JSON-RPC 2.0 request or notification (`initialize`, `server/discover`, \
        `tools/list`, `tools/call`, `notifications/cancelled`, …)."})
}
