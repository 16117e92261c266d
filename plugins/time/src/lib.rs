//! The `time` plugin: one tool, `current_time`, that tells the model what time it is in a timezone.
//!
//! The model has no clock; this is the smallest useful tool and the one the daemon's end-to-end tests
//! call. The rendering (`render`) is pure so that tests can pin the instant; only the tool's
//! `call` reads the system clock.

use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use chrono_tz::Tz;
use plugin_contract::{Plugin, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use serde_json::{json, Value};

/// The zone used when the input names none. The daemon fills the schema's default before calling,
/// but the tool does not rely on that.
const DEFAULT_TIMEZONE: &str = "UTC";

/// The `time` plugin. Register it once; it holds no state.
#[derive(Clone, Copy, Debug, Default)]
pub struct TimePlugin;

impl Plugin for TimePlugin {
    fn name(&self) -> &str {
        "time"
    }

    fn tools(&self) -> Vec<Arc<dyn Tool>> {
        vec![Arc::new(CurrentTime)]
    }
}

/// The `current_time` tool: the current instant in an IANA timezone.
struct CurrentTime;

#[plugin_contract::async_trait]
impl Tool for CurrentTime {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "current_time".to_owned(),
            description: "Returns the current date and time in an IANA timezone (UTC if none is given): \
                          `iso` is an RFC 3339 timestamp with the zone's UTC offset, `unix` the Unix time \
                          in seconds, `timezone` the zone's name."
                .to_owned(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "timezone": {
                        "type": "string",
                        "default": DEFAULT_TIMEZONE,
                        "description": "IANA timezone name, e.g. Europe/Berlin"
                    }
                },
                "additionalProperties": false
            }),
            output_schema: Some(json!({
                "type": "object",
                "properties": {
                    "iso": {"type": "string"},
                    "unix": {"type": "integer"},
                    "timezone": {"type": "string"}
                },
                "required": ["iso", "unix", "timezone"],
                "additionalProperties": false
            })),
            timeout: None,
        }
    }

    async fn call(&self, _ctx: ToolContext, input: Value) -> Result<ToolOutput, ToolError> {
        let tz = parse_timezone(&input)?;
        Ok(render(Utc::now(), tz))
    }
}

/// Reads `timezone` from the input: absent or `null` means UTC; anything else must be an IANA name.
fn parse_timezone(input: &Value) -> Result<Tz, ToolError> {
    let name = match input.get("timezone") {
        None | Some(Value::Null) => DEFAULT_TIMEZONE,
        Some(Value::String(name)) => name.as_str(),
        Some(other) => {
            return Err(ToolError::InvalidInput(format!(
                "`timezone` must be a string such as Europe/Berlin, not {other}"
            )))
        }
    };
    Tz::from_str(name).map_err(|_| {
        ToolError::InvalidInput(format!(
            "unknown timezone `{name}`: use an IANA name such as Europe/Berlin"
        ))
    })
}

/// The tool's answer for the instant `now` seen in `tz`: seconds precision, the zone's offset
/// spelled out (`+00:00` for UTC, never `Z`, so every answer has the same shape).
fn render(now: DateTime<Utc>, tz: Tz) -> ToolOutput {
    let local = now.with_timezone(&tz);
    let iso = local.to_rfc3339_opts(SecondsFormat::Secs, false);
    let name = tz.name();
    ToolOutput::structured(
        format!("{iso} ({name})"),
        json!({"iso": iso, "unix": now.timestamp(), "timezone": name}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    use plugin_contract::testing::{tool_context, StubDelegate, StubStore};

    /// `current_time` uses no capability: an empty store and a delegate it must not call.
    fn ctx() -> ToolContext {
        tool_context(
            Some("thr_test"),
            StubStore::default(),
            Arc::new(StubDelegate::default()),
        )
    }

    async fn call(input: Value) -> Result<ToolOutput, ToolError> {
        let tools = TimePlugin.tools();
        assert_eq!(tools.len(), 1);
        tools[0].call(ctx(), input).await
    }

    /// Checks a successful call: the zone name, the offsets the zone may have, and that `iso` and
    /// `unix` name the same instant, close to now.
    #[track_caller]
    fn check_ok(output: &ToolOutput, zone: &str, offsets: &[&str]) {
        let structured = output.structured.as_ref().expect("structured output");
        assert_eq!(structured["timezone"], zone, "{structured}");
        let iso = structured["iso"].as_str().expect("iso is a string");
        let unix = structured["unix"].as_i64().expect("unix is an integer");
        assert!(
            offsets.iter().any(|offset| iso.ends_with(offset)),
            "{iso} has none of the offsets {offsets:?}"
        );
        let parsed = DateTime::parse_from_rfc3339(iso).expect("iso is RFC 3339");
        assert_eq!(parsed.timestamp(), unix, "iso and unix disagree");
        assert!(
            (Utc::now().timestamp() - unix).abs() < 60,
            "{unix} is not now"
        );
        assert_eq!(output.text, format!("{iso} ({zone})"));
        let keys: Vec<&String> = structured.as_object().expect("an object").keys().collect();
        assert_eq!(keys.len(), 3, "only iso, unix and timezone: {keys:?}");
    }

    #[test]
    fn plugin_serves_current_time() {
        assert_eq!(TimePlugin.name(), "time");
        let names: Vec<String> = TimePlugin.tools().iter().map(|t| t.spec().name).collect();
        assert_eq!(names, ["current_time"]);
        assert!(TimePlugin.context_provider().is_none());
    }

    #[tokio::test]
    async fn defaults_to_utc() {
        for input in [
            json!({}),
            json!({"timezone": null}),
            json!({"timezone": "UTC"}),
        ] {
            let output = call(input.clone()).await.expect("UTC works");
            check_ok(&output, "UTC", &["+00:00"]);
        }
    }

    #[tokio::test]
    async fn berlin_is_one_or_two_hours_ahead() {
        let output = call(json!({"timezone": "Europe/Berlin"}))
            .await
            .expect("Berlin works");
        check_ok(&output, "Europe/Berlin", &["+01:00", "+02:00"]);
    }

    #[tokio::test]
    async fn bad_timezones_are_invalid_input_naming_the_problem() {
        let cases = [
            (
                json!({"timezone": "Mars/Base"}),
                "unknown timezone `Mars/Base`: use an IANA name such as Europe/Berlin",
            ),
            (
                json!({"timezone": ""}),
                "unknown timezone ``: use an IANA name such as Europe/Berlin",
            ),
            (
                json!({"timezone": 5}),
                "`timezone` must be a string such as Europe/Berlin, not 5",
            ),
        ];
        for (input, expected) in cases {
            match call(input.clone()).await {
                Err(ToolError::InvalidInput(message)) => assert_eq!(message, expected, "{input}"),
                other => panic!("{input}: expected InvalidInput, got {other:?}"),
            }
        }
    }

    #[test]
    fn render_pins_offset_and_instant() {
        let winter = DateTime::parse_from_rfc3339("2026-11-21T22:41:07Z")
            .expect("valid")
            .with_timezone(&Utc);
        let summer = DateTime::parse_from_rfc3339("2026-07-01T12:00:00.750Z")
            .expect("valid")
            .with_timezone(&Utc);
        let cases = [
            (
                winter,
                "Europe/Berlin",
                "2026-11-21T23:41:07+01:00 (Europe/Berlin)",
                1_795_300_867,
            ),
            (
                summer,
                "Europe/Berlin",
                "2026-07-01T14:00:00+02:00 (Europe/Berlin)",
                1_782_907_200,
            ),
            (
                winter,
                "UTC",
                "2026-11-21T22:41:07+00:00 (UTC)",
                1_795_300_867,
            ),
            (
                winter,
                "Asia/Kolkata",
                "2026-11-22T04:11:07+05:30 (Asia/Kolkata)",
                1_795_300_867,
            ),
            (
                winter,
                "America/New_York",
                "2026-11-21T17:41:07-05:00 (America/New_York)",
                1_795_300_867,
            ),
        ];
        for (now, zone, text, unix) in cases {
            let tz = Tz::from_str(zone).expect("known zone");
            let output = render(now, tz);
            assert_eq!(output.text, text);
            let iso = text.split(' ').next().expect("iso first");
            assert_eq!(
                output.structured,
                Some(json!({"iso": iso, "unix": unix, "timezone": zone})),
                "{zone}"
            );
        }
    }
}
