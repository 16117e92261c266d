//! What keeps a thread's CLI within its thread: the built-in tools removed from every child
//! ([`CONTAINED_TOOLS`]) and those that act within their turn ([`IN_TURN_TOOLS`]), which
//! together classify every built-in tool of the pinned CLI (`docs/cli-upgrades.md`), the
//! switches set in every child ([`CONTAINMENT_SWITCHES`]), and the `lean` profile's switches.

use crate::config::Config;

/// The CLI's feature switches the `lean` profile sets (to `1`); `claude.env` can set any back.
/// (Background tasks are off in every profile: [`CONTAINMENT_SWITCHES`].)
/// Together with no built-in tools and no token deltas they save 8–20 % of the CLI's CPU per
/// warm turn (across `just bench` runs). The other switches of 2.1.330 (42 of its
/// `CLAUDE_CODE_DISABLE_*`, `CLAUDE_CODE_SKIP_*` and `DISABLE_*` that change no behaviour a thread
/// relies on) were each measured on a raw process, 20 warm turns after 20, three times: none
/// saved more than the runs' own spread (±4 ms of ~40), so none is here.
pub const LEAN_SWITCHES: &[&str] = &[
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
    "DISABLE_AUTOUPDATER",
    "DISABLE_GROWTHBOOK",
    "CLAUDE_CODE_DISABLE_FILE_CHECKPOINTING",
    "CLAUDE_CODE_DISABLE_ATTACHMENTS",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE",
    "CLAUDE_CODE_DISABLE_AGENT_PROGRESS_SUMMARIES",
    "CLAUDE_CODE_DISABLE_BUNDLED_SKILLS",
    "CLAUDE_CODE_DISABLE_WORKFLOWS",
    "CLAUDE_CODE_DISABLE_PROACTIVITY",
    "CLAUDE_CODE_DISABLE_FILE_MENTIONS",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY",
    "CLAUDE_CODE_DISABLE_CLAUDE_MDS",
];

/// Built-in tools of `claude` 2.1.332 that let a thread's model reach outside its thread, each
/// removed from every child with `--disallowedTools` (sub-agents included; a call is the tool
/// error "No such tool available"). Every name in the CLI's own table of built-in tools (54 in
/// 2.1.330 and 2.1.332) is here or in [`IN_TURN_TOOLS`], never both: the test
/// `containment::every_builtin_tool_of_the_pinned_cli_is_classified` reads the table from the
/// pinned binary and fails on a tool in neither (docs/cli-upgrades.md says how to classify one).
/// Measured with the real CLI (2.1.330): with the defaults, `ListAgents` listed every other
/// thread's live process and `SendMessage` started a turn in it; `CronCreate`,
/// `ScheduleWakeup`, `Monitor` and a background `Agent` or `Bash` each made the CLI start a turn
/// of its own later, whose `result` then took the place of the next user message's reply.
pub const CONTAINED_TOOLS: &[&str] = &[
    // Other sessions on this machine (every thread's process registers in the shared config dir).
    "ListAgents",
    "SendMessage",
    // Turns the CLI starts by itself, later: schedules, wake-ups, watchers, workflows, triggers.
    "CronCreate",
    "CronDelete",
    "CronList",
    "ScheduleWakeup",
    "Monitor",
    "Workflow",
    "RemoteTrigger",
    "TaskStop",
    // Task lists kept in the shared config dir, shared by list id across sessions.
    "TaskCreate",
    "TaskGet",
    "TaskList",
    "TaskUpdate",
    // Channels to a person outside the thread's API.
    "PushNotification",
    "ReadNotifications",
    "SendUserFile",
    "SendUserMessage",
    // A worktree moves the session out of the thread's folder (its CLI project).
    "EnterWorktree",
    "ExitWorktree",
];

/// Built-in tools of `claude` 2.1.332 that act only within the turn that calls them, on what
/// the thread may reach anyway (its folders under the approvals and the walls, its own session,
/// its own MCP servers), so they stay. With [`CONTAINED_TOOLS`] this covers the CLI's table of
/// built-in tools exactly (see there). A tool goes here only once read for what it reaches:
/// another session, a turn started later or a channel out of the thread's API puts it in
/// [`CONTAINED_TOOLS`] instead.
pub const IN_TURN_TOOLS: &[&str] = &[
    // Files and commands in the thread's folders, each call decided by the approvals, inside
    // the walls (`PowerShell` exists on Windows only).
    "Bash",
    "PowerShell",
    "Read",
    "Edit",
    "Write",
    "Glob",
    "Grep",
    "NotebookEdit",
    "LSP",
    // The web, each call decided by the approvals (and the walls' network).
    "WebFetch",
    "WebSearch",
    // The turn's own session: foreground sub-agents (background tasks are off in every child:
    // `CONTAINMENT_SWITCHES`), skills, plans, to-dos, questions, tool loading, goals, findings.
    "Agent",
    "SubagentHandback",
    "Skill",
    "propose_skills",
    "TodoWrite",
    "ToolSearch",
    "AskUserQuestion",
    "EnterPlanMode",
    "ExitPlanMode",
    "EndConversation",
    "SetGoal",
    "ReportFindings",
    // The process's own MCP servers (ours and its profile's).
    "ListMcpResourcesTool",
    "ReadMcpResourceTool",
    "ReadMcpResourceDirTool",
    "WaitForMcpServers",
    // claude.ai account features: enabled only for a claude.ai login, which children never have
    // (they hold an API key for the gateway); nonessential traffic is off too.
    "Artifact",
    "ClaudeDesign",
    "Projects",
    "SendFeedback",
    "ShareOnboardingGuide",
    "ShowOnboardingRolePicker",
    "OfferChromeSetup",
];

/// The tools of [`CONTAINED_TOOLS`] that `claude.scheduling_tools` gives back: the CLI then
/// starts turns by itself, which the pipeline records as the thread's own (origin `cli`).
pub const SCHEDULING_TOOLS: &[&str] = &[
    "CronCreate",
    "CronDelete",
    "CronList",
    "ScheduleWakeup",
    "Monitor",
    "TaskStop",
];

/// The tools removed from `config`'s children.
pub(super) fn contained_tools(config: &Config) -> impl Iterator<Item = &'static &'static str> {
    let scheduling = config.claude.scheduling_tools;
    CONTAINED_TOOLS
        .iter()
        .filter(move |tool| !(scheduling && SCHEDULING_TOOLS.contains(tool)))
}

/// The switches of [`CONTAINMENT_SWITCHES`] `config`'s children get: with
/// `claude.scheduling_tools`, messaging only.
pub(super) fn containment_switches(
    config: &Config,
) -> impl Iterator<Item = &'static (&'static str, &'static str)> {
    let scheduling = config.claude.scheduling_tools;
    CONTAINMENT_SWITCHES
        .iter()
        .filter(move |(name, _)| !scheduling || *name == "CLAUDE_CODE_HARBOR_KITE")
}

/// The CLI's switches that containment sets in every child, after `claude.env` (so no setting
/// turns them back on; `claude.scheduling_tools` leaves out the last two). Each also holds where
/// a tool list does not reach:
/// - `CLAUDE_CODE_HARBOR_KITE=0`: no messaging socket and no peer key at all, so other sessions
///   cannot reach this one either (`ListAgents` is gone even from `--tools default`);
/// - `CLAUDE_CODE_DISABLE_CRON=1`: no scheduler, so a durable cron left in a thread's folder
///   never fires;
/// - `CLAUDE_CODE_DISABLE_BACKGROUND_TASKS=1`: `Agent` runs in the foreground (within the turn)
///   and `Bash` refuses `run_in_background`, so no task finishes after its turn and starts
///   another.
pub const CONTAINMENT_SWITCHES: &[(&str, &str)] = &[
    ("CLAUDE_CODE_HARBOR_KITE", "0"),
    ("CLAUDE_CODE_DISABLE_CRON", "1"),
    ("CLAUDE_CODE_DISABLE_BACKGROUND_TASKS", "1"),
];
