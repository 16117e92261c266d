//! A schedule's cron expression read in its time zone ([`Cron`]): parsing (the `croner` crate:
//! five fields, or six with seconds first; ranges, steps, names, `L`, `#`, `W`, `@daily` and the
//! like) and the ticks around a time (`chrono-tz` for the zone's rules, daylight saving included).
//! No IO, no date arithmetic of ours.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds, Year};

/// A cron expression in a time zone.
#[derive(Clone, Debug)]
pub struct Cron {
    cron: croner::Cron,
    tz: Tz,
}

/// The longest cron expression taken: six fields of lists and ranges fit well within it (a
/// 100 KB one was stored).
pub const MAX_CRON_CHARS: usize = 256;

impl Cron {
    /// Parses `expr` (at most [`MAX_CRON_CHARS`]) in the IANA zone `timezone`; the error names
    /// what is wrong.
    pub fn parse(expr: &str, timezone: &str) -> Result<Cron, String> {
        let chars = expr.chars().count();
        if chars > MAX_CRON_CHARS {
            return Err(format!(
                "cron: {chars} characters; an expression is at most {MAX_CRON_CHARS}"
            ));
        }
        let tz: Tz = timezone
            .parse()
            .map_err(|_| format!("timezone: {timezone:?} is not an IANA time zone"))?;
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|err| format!("cron: {expr:?} is not a cron expression: {err}"))?;
        let parsed = Cron { cron, tz };
        if parsed.next_after(Utc::now()).is_none() {
            return Err(format!("cron: {expr:?} never fires"));
        }
        Ok(parsed)
    }

    /// The first tick strictly after `t`; `None` when there is none.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = t.with_timezone(&self.tz);
        let next = self.cron.find_next_occurrence(&local, false).ok()?;
        Some(next.with_timezone(&Utc))
    }

    /// The last tick at or before `t`; `None` when there is none.
    pub fn last_at_or_before(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = t.with_timezone(&self.tz);
        let last = self.cron.find_previous_occurrence(&local, true).ok()?;
        Some(last.with_timezone(&Utc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("a time")
            .with_timezone(&Utc)
    }

    #[test]
    fn five_fields_tick_on_minutes_in_the_zone() {
        let cron = Cron::parse("30 9 * * *", "Europe/Berlin").expect("parses");
        // 09:30 in Berlin is 08:30 UTC in winter and 07:30 UTC in summer.
        assert_eq!(
            cron.next_after(at("2026-01-10T00:00:00Z")),
            Some(at("2026-01-10T08:30:00Z"))
        );
        assert_eq!(
            cron.next_after(at("2026-07-10T00:00:00Z")),
            Some(at("2026-07-10T07:30:00Z"))
        );
    }

    #[test]
    fn a_sixth_field_is_seconds() {
        let cron = Cron::parse("*/2 * * * * *", "UTC").expect("parses");
        let t = at("2026-03-01T10:00:01Z");
        assert_eq!(cron.next_after(t), Some(at("2026-03-01T10:00:02Z")));
        assert_eq!(cron.last_at_or_before(t), Some(at("2026-03-01T10:00:00Z")));
        // At a tick: that tick is the last one, and the next is strictly after.
        let tick = at("2026-03-01T10:00:02Z");
        assert_eq!(cron.last_at_or_before(tick), Some(tick));
        assert_eq!(cron.next_after(tick), Some(at("2026-03-01T10:00:04Z")));
    }

    /// A cron of 100 KB was stored (#46): the length is bounded, whatever the expression.
    #[test]
    fn an_overlong_expression_is_refused() {
        // Every minute, hour and day listed: a real expression, and a long one.
        let list = |from: u32, to: u32| {
            (from..to)
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        let long = format!("{} {} {} * *", list(0, 60), list(0, 24), list(1, 32));
        assert!(long.chars().count() > MAX_CRON_CHARS);
        let err = Cron::parse(&long, "UTC").expect_err("too long");
        assert!(err.contains("at most 256"), "{err}");
        let huge = format!("{} * * * *", "0,".repeat(50_000));
        assert!(Cron::parse(&huge, "UTC").is_err());
    }

    #[test]
    fn bad_expressions_and_zones_are_named() {
        let err = Cron::parse("61 * * * *", "UTC").expect_err("minute 61");
        assert!(err.starts_with("cron:"), "{err}");
        let err = Cron::parse("* * * * *", "Mars/Olympus").expect_err("no such zone");
        assert!(err.starts_with("timezone:"), "{err}");
        let err = Cron::parse("0 0 30 2 *", "UTC").expect_err("30 February");
        assert!(err.contains("never"), "{err}");
    }
}
