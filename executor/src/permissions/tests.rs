use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum V {
    Allow,
    Ask,
    Deny,
}

fn verdict(policy: &PermissionPolicy, tool: &str, effect: ToolEffect, subject: &str) -> V {
    let mode = match tool {
        "Read" | "Write" | "Edit" => GlobMode::Path,
        "WebFetch" => GlobMode::Url,
        _ => GlobMode::Text,
    };
    match policy.decide(
        tool,
        effect,
        Some(Subject {
            text: subject,
            mode,
        }),
    ) {
        Verdict::Allow => V::Allow,
        Verdict::Ask => V::Ask,
        Verdict::Deny(_) => V::Deny,
    }
}

fn rules(deny: &[&str], ask: &[&str], allow: &[&str]) -> PermissionRules {
    let parse = |list: &[&str]| list.iter().map(|r| Rule::parse(r).unwrap()).collect();
    PermissionRules {
        deny: parse(deny),
        ask: parse(ask),
        allow: parse(allow),
    }
}

const MODES: [PermissionMode; 4] = [
    PermissionMode::Default,
    PermissionMode::AutoEdit,
    PermissionMode::Plan,
    PermissionMode::Yolo,
];

/// Mode defaults when no rule matches: one row per tool kind, one column per mode
/// (default, autoEdit, plan, yolo).
#[test]
fn mode_defaults_by_tool_effect() {
    let table = [
        (
            "Read",
            ToolEffect::ReadOnly,
            "/w/a.txt",
            [V::Allow, V::Allow, V::Allow, V::Allow],
        ),
        (
            "Grep",
            ToolEffect::ReadOnly,
            "/w",
            [V::Allow, V::Allow, V::Allow, V::Allow],
        ),
        (
            "Write",
            ToolEffect::Edit,
            "/w/a.txt",
            [V::Ask, V::Allow, V::Deny, V::Allow],
        ),
        (
            "Edit",
            ToolEffect::Edit,
            "/w/a.txt",
            [V::Ask, V::Allow, V::Deny, V::Allow],
        ),
        (
            "Bash",
            ToolEffect::Execute,
            "ls",
            [V::Ask, V::Ask, V::Deny, V::Allow],
        ),
        (
            "WebFetch",
            ToolEffect::Network,
            "https://x.test/",
            [V::Ask, V::Ask, V::Allow, V::Allow],
        ),
        (
            "WebSearch",
            ToolEffect::Network,
            "rust async",
            [V::Ask, V::Ask, V::Allow, V::Allow],
        ),
    ];
    for (tool, effect, subject, expected) in table {
        for (mode, want) in MODES.iter().zip(expected) {
            let policy = PermissionPolicy {
                mode: *mode,
                rules: PermissionRules::default(),
            };
            assert_eq!(
                verdict(&policy, tool, effect, subject),
                want,
                "{tool} in {mode:?}"
            );
        }
    }
}

/// Rules × modes × tools: a matching rule decides in every mode; deny > ask > allow.
#[test]
fn rules_override_modes_in_order() {
    let r = rules(
        &["Bash:rm *", "Write:/w/secret/**", "WebFetch"],
        &["Read:/w/private/*", "Bash:git push*"],
        &["Bash:git *", "Bash:rm -i *", "Write:/w/**", "Read"],
    );
    // (tool, effect, subject, expected in every mode)
    let table = [
        ("Bash", ToolEffect::Execute, "rm -rf /", V::Deny),
        ("Bash", ToolEffect::Execute, "rm -i a.txt", V::Deny),
        ("Bash", ToolEffect::Execute, "git push origin main", V::Ask),
        ("Bash", ToolEffect::Execute, "git status", V::Allow),
        ("Write", ToolEffect::Edit, "/w/secret/key.pem", V::Deny),
        ("Write", ToolEffect::Edit, "/w/src/a.rs", V::Allow),
        ("Read", ToolEffect::ReadOnly, "/w/private/diary.txt", V::Ask),
        (
            "Read",
            ToolEffect::ReadOnly,
            "/w/private/sub/diary.txt",
            V::Allow,
        ),
        (
            "WebFetch",
            ToolEffect::Execute,
            "https://example.com/",
            V::Deny,
        ),
    ];
    for mode in MODES {
        let policy = PermissionPolicy {
            mode,
            rules: r.clone(),
        };
        for (tool, effect, subject, want) in table {
            assert_eq!(
                verdict(&policy, tool, effect, subject),
                want,
                "{tool} {subject} in {mode:?}"
            );
        }
    }
}

/// A subject no rule matches falls through to the mode.
#[test]
fn unmatched_subjects_fall_back_to_the_mode() {
    let policy = PermissionPolicy {
        mode: PermissionMode::AutoEdit,
        rules: rules(&["Bash:curl *"], &[], &["Bash:ls*"]),
    };
    assert_eq!(
        verdict(&policy, "Bash", ToolEffect::Execute, "make"),
        V::Ask
    );
    assert_eq!(
        verdict(&policy, "Bash", ToolEffect::Execute, "ls -la"),
        V::Allow
    );
    assert_eq!(verdict(&policy, "Edit", ToolEffect::Edit, "/w/x"), V::Allow);
    let no_subject = policy.decide("Bash", ToolEffect::Execute, None);
    assert_eq!(
        no_subject,
        Verdict::Ask,
        "pattern rules never match a call without subject"
    );
}

#[test]
fn rules_parse_and_refuse_nonsense() {
    assert_eq!(Rule::parse("Bash").unwrap().pattern, None);
    let rule = Rule::parse("Bash:git log:*").unwrap();
    assert_eq!(rule.tool, "Bash");
    assert_eq!(rule.pattern.unwrap().as_str(), "git log:*");
    assert!(Rule::parse(":x").is_err());
    assert!(Rule::parse("Bash:").is_err());
    assert_eq!(
        PermissionMode::parse("autoEdit"),
        Some(PermissionMode::AutoEdit)
    );
    assert_eq!(PermissionMode::parse("auto"), None);
}

/// TOOL-25: `deny` and `ask` match any reading of a URL whatever its case; `allow` matches only
/// when every reading matches, case and all.
#[test]
fn url_rules_restrict_on_any_reading_and_allow_on_all() {
    let policy = PermissionPolicy {
        mode: PermissionMode::Default,
        rules: rules(
            &["WebFetch:https://h.test/Admin*"],
            &["WebFetch:https://h.test/private/*"],
            &["WebFetch:https://h.test/public/*"],
        ),
    };
    let net = ToolEffect::Network;
    let cases = [
        ("https://h.test/admin", V::Deny),
        ("https://h.test/ADMIN/x", V::Deny),
        ("https://h.test/x/..;/admin", V::Deny),
        ("https://h.test/PRIVATE/x", V::Ask),
        ("https://h.test//private/x", V::Ask),
        ("https://h.test/public/x", V::Allow),
        ("https://h.test/public/%78", V::Allow),
        ("https://h.test/Public/x", V::Ask),
        ("https://h.test/public/..;/x", V::Ask),
        ("https://h.test/public/..%2Fx", V::Ask),
    ];
    for (url, expected) in cases {
        assert_eq!(verdict(&policy, "WebFetch", net, url), expected, "{url}");
    }
}
