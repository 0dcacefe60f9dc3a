//! Permission rules and modes (docs/agent.md §3, steps 3 and 4 of the permission pipeline).
//!
//! Rules come in three lists checked in a fixed order: `deny`, then `ask`, then `allow`; the
//! first list with a matching rule decides, so a `deny` always wins. A rule is `Tool` (every
//! call of the tool) or `Tool:pattern`, a glob matched against the call's subject (the path of
//! a file tool, the command line of `Bash`, the URL of `WebFetch`). When no rule matches, the
//! mode decides from what the tool can do. Validation and the tools' own safety checks run
//! before this and cannot be overridden here.
//!
//! A command line ([`GlobMode::Command`], the subject of `Bash`) is judged per simple command
//! (reliability catalogue TOOL-07): a `deny` or `ask` rule that matches any command of the line
//! (or the whole line) decides, and pattern `allow` rules allow the line only when every one of
//! its commands is a plain command matched by an allow rule. A line the shell splitter cannot
//! follow is never allowed by a pattern rule: it falls to the mode.
//!
//! A URL ([`GlobMode::Url`], the subject of `WebFetch`) is judged on its canonical readings
//! (reliability catalogue TOOL-25, see [`url`]): a `deny` or `ask` rule decides when it matches
//! any reading, ignoring case; an `allow` rule only when it matches every reading, case and all.
//! So no spelling of a path slips past a `deny` rule, and none widens an `allow` rule.

mod indirection;
pub mod shell;
mod url;

pub use crate::glob::{Glob, GlobMode};

/// What a tool can do to the world; decides the default permission (docs/agent.md §3, §6.14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolEffect {
    /// Reads only: allowed by default.
    ReadOnly,
    /// Changes files.
    Edit,
    /// Runs commands or otherwise acts: asks by default.
    Execute,
    /// Reads from the network (`WebFetch`'s GET, `WebSearch`): asks in `default` and
    /// `autoEdit`, and runs in `plan` (exploring is what planning is for, as in the reference).
    Network,
}

/// What happens to a tool call when no rule matched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PermissionMode {
    /// Read-only tools run; tools that edit files or execute ask.
    #[default]
    Default,
    /// Read-only tools and file edits run; execution asks.
    AutoEdit,
    /// Only read-only tools run; everything else is denied.
    Plan,
    /// Everything runs.
    Yolo,
}

impl PermissionMode {
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "default" => Some(Self::Default),
            "autoEdit" => Some(Self::AutoEdit),
            "plan" => Some(Self::Plan),
            "yolo" => Some(Self::Yolo),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::AutoEdit => "autoEdit",
            Self::Plan => "plan",
            Self::Yolo => "yolo",
        }
    }
}

/// One rule: `Tool` or `Tool:pattern`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub tool: String,
    pub pattern: Option<Glob>,
}

impl Rule {
    pub fn parse(text: &str) -> Result<Self, String> {
        let (tool, pattern) = match text.split_once(':') {
            Some((tool, pattern)) => (tool.trim(), Some(pattern)),
            None => (text.trim(), None),
        };
        if tool.is_empty() {
            return Err(format!("permission rule {text:?} names no tool"));
        }
        if pattern.is_some_and(str::is_empty) {
            return Err(format!("permission rule {text:?} has an empty pattern"));
        }
        Ok(Self {
            tool: tool.to_owned(),
            pattern: pattern.map(Glob::new),
        })
    }

    fn matches(&self, tool: &str, subject: Option<&Subject<'_>>) -> bool {
        if self.tool != tool {
            return false;
        }
        match (&self.pattern, subject) {
            (None, _) => true,
            (Some(pattern), Some(subject)) => match pattern.as_str().strip_prefix("domain:") {
                Some(domain) => host_matches(subject.text, domain),
                None => pattern.matches(subject.text, subject.mode),
            },
            // A pattern rule never matches a call that has no subject.
            (Some(_), None) => false,
        }
    }

    fn describe(&self) -> String {
        match &self.pattern {
            Some(pattern) => format!("{}:{}", self.tool, pattern.as_str()),
            None => self.tool.clone(),
        }
    }
}

/// A `domain:HOST` rule (for URL subjects, `WebFetch`): the URL's parsed host, after IDNA
/// normalisation, is `HOST` or a subdomain of it on a dot boundary (reliability catalogue
/// TOOL-17), whatever the port. A glob such as `https://docs.example.com*` would also match
/// `https://docs.example.com.evil.test/`; this cannot.
fn host_matches(url: &str, domain: &str) -> bool {
    let host_of = |url: &str| {
        reqwest::Url::parse(url)
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned))
    };
    let (Some(host), Some(domain)) = (host_of(url), host_of(&format!("http://{domain}/"))) else {
        return false;
    };
    host == domain
        || host
            .strip_suffix(domain.as_str())
            .is_some_and(|rest| rest.ends_with('.'))
}

/// What a rule pattern is matched against.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    pub text: &'a str,
    pub mode: GlobMode,
}

/// The permission rules of a deployment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PermissionRules {
    pub deny: Vec<Rule>,
    pub ask: Vec<Rule>,
    pub allow: Vec<Rule>,
}

/// Mode and rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PermissionPolicy {
    pub mode: PermissionMode,
    pub rules: PermissionRules,
}

/// The outcome of rules and mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Ask,
    /// With the reason the model is told.
    Deny(String),
}

impl PermissionPolicy {
    pub fn decide(&self, tool: &str, effect: ToolEffect, subject: Option<Subject<'_>>) -> Verdict {
        self.decide_in(self.mode, tool, effect, subject)
    }

    /// [`Self::decide`] in `mode` instead of the configured one (a session in plan mode).
    pub fn decide_in(
        &self,
        mode: PermissionMode,
        tool: &str,
        effect: ToolEffect,
        subject: Option<Subject<'_>>,
    ) -> Verdict {
        match subject {
            Some(line) if line.mode == GlobMode::Command => {
                self.decide_command(mode, tool, effect, line.text)
            }
            Some(url) if url.mode == GlobMode::Url => self.decide_url(mode, tool, effect, url.text),
            subject => {
                let matches = |rule: &Rule| rule.matches(tool, subject.as_ref());
                self.decide_by(mode, tool, effect, matches, matches)
            }
        }
    }

    /// The first list with a rule that `restricts` (deny, ask) or `permits` (allow) decides.
    fn decide_by(
        &self,
        mode: PermissionMode,
        tool: &str,
        effect: ToolEffect,
        restricts: impl Fn(&Rule) -> bool,
        permits: impl Fn(&Rule) -> bool,
    ) -> Verdict {
        if let Some(rule) = self.rules.deny.iter().find(|rule| restricts(rule)) {
            return Verdict::Deny(format!("Denied by the permission rule {}", rule.describe()));
        }
        if self.rules.ask.iter().any(&restricts) {
            return Verdict::Ask;
        }
        if self.rules.allow.iter().any(&permits) {
            return Verdict::Allow;
        }
        mode_default(mode, tool, effect)
    }

    fn decide_url(
        &self,
        mode: PermissionMode,
        tool: &str,
        effect: ToolEffect,
        url: &str,
    ) -> Verdict {
        let readings = url::readings(url);
        let lowered: Vec<String> = readings.iter().map(|r| r.to_lowercase()).collect();
        let on = |rule: &Rule, text: &str| {
            rule.matches(
                tool,
                Some(&Subject {
                    text,
                    mode: GlobMode::Text,
                }),
            )
        };
        let restricts = |rule: &Rule| {
            let lowered_rule = Rule {
                tool: rule.tool.clone(),
                pattern: rule
                    .pattern
                    .as_ref()
                    .map(|p| Glob::new(&p.as_str().to_lowercase())),
            };
            lowered.iter().any(|text| on(&lowered_rule, text))
        };
        let permits = |rule: &Rule| readings.iter().all(|text| on(rule, text));
        self.decide_by(mode, tool, effect, restricts, permits)
    }

    fn decide_command(
        &self,
        mode: PermissionMode,
        tool: &str,
        effect: ToolEffect,
        line: &str,
    ) -> Verdict {
        let commands = shell::split(line);
        // What deny and ask rules see: the whole line and each command; for a line that could
        // not be split, rough pieces of it, so that a deny rule still catches `…; curl x`.
        let mut candidates = vec![line.to_owned()];
        match &commands {
            Some(commands) => candidates.extend(commands.iter().map(|c| c.text.clone())),
            None => candidates.extend(shell::rough_pieces(line)),
        }
        let matches = |rule: &Rule, text: &str| {
            rule.matches(
                tool,
                Some(&Subject {
                    text,
                    mode: GlobMode::Text,
                }),
            )
        };
        let find = |rules: &[Rule]| {
            rules
                .iter()
                .find(|rule| candidates.iter().any(|text| matches(rule, text)))
                .map(Rule::describe)
        };
        if let Some(rule) = find(&self.rules.deny) {
            return Verdict::Deny(format!("Denied by the permission rule {rule}"));
        }
        if find(&self.rules.ask).is_some() {
            return Verdict::Ask;
        }
        let allow = &self.rules.allow;
        // A rule naming the tool alone allows every line, however complex: the operator said so.
        if allow
            .iter()
            .any(|rule| rule.tool == tool && rule.pattern.is_none())
        {
            return Verdict::Allow;
        }
        let every_command_allowed = commands.as_ref().is_some_and(|commands| {
            !commands.is_empty()
                && commands.iter().all(|command| {
                    command.plain && allow.iter().any(|rule| matches(rule, &command.text))
                })
        });
        if every_command_allowed {
            return Verdict::Allow;
        }
        mode_default(mode, tool, effect)
    }
}

/// What the mode decides when no rule matched.
fn mode_default(mode: PermissionMode, tool: &str, effect: ToolEffect) -> Verdict {
    match (mode, effect) {
        (PermissionMode::Yolo, _) | (_, ToolEffect::ReadOnly) => Verdict::Allow,
        (PermissionMode::AutoEdit, ToolEffect::Edit) => Verdict::Allow,
        (PermissionMode::Plan, ToolEffect::Network) => Verdict::Allow,
        (PermissionMode::Default, _)
        | (PermissionMode::AutoEdit, ToolEffect::Execute | ToolEffect::Network) => Verdict::Ask,
        (PermissionMode::Plan, _) => Verdict::Deny(format!(
            "{tool} is not available in plan mode: only read-only tools run"
        )),
    }
}

#[cfg(test)]
mod tests;
