//! Commands whose arguments make them run another program or command (reliability catalogue
//! TOOL-24): a pattern allow rule matches a command's text, so `Bash:git *` would otherwise
//! allow `git -c core.fsmonitor=CMD status` or `git -c alias.x='!CMD' x`, and `Bash:find *`
//! would allow `find . -exec CMD`. Such a command is never allowed by a pattern rule (it is asked,
//! or denied in `plan` mode); a deny rule still sees it. The lists are the well-known ways, not a
//! proof that nothing else exists: docs/security.md says what a pattern rule can promise.

/// Programs whose purpose is to run another program named in their arguments, and shells.
const RUNNERS: [&str; 33] = [
    "env", "xargs", "sudo", "doas", "su", "runuser", "nice", "ionice", "nohup", "timeout",
    "stdbuf", "command", "exec", "builtin", "watch", "flock", "setsid", "chroot", "unshare",
    "nsenter", "strace", "ltrace", "busybox", "parallel", "script", "sh", "bash", "dash", "zsh",
    "ksh", "fish", "source", ".",
];

/// Options that make a program run a command its value names. A two-character option (`-e`)
/// also counts inside a cluster of short options (`-avze`); a longer one counts as written or
/// with `=value`.
const CODE_OPTIONS: [(&str, &[&str]); 7] = [
    ("find", &["-exec", "-execdir", "-ok", "-okdir"]),
    ("rg", &["--pre"]),
    (
        "tar",
        &[
            "--to-command",
            "--checkpoint-action",
            "--use-compress-program",
            "--info-script",
            "--new-volume-script",
            "-I",
            "-F",
        ],
    ),
    ("rsync", &["--rsh", "--rsync-path", "-e"]),
    ("sort", &["--compress-program"]),
    ("ssh", &["-o", "-F"]),
    ("zip", &["--unzip-command", "-TT"]),
];

/// git's global options that load configuration (which can name commands: `core.fsmonitor`,
/// `core.pager`, `alias.*`, `core.sshCommand`) or point it at another repository's.
const GIT_CONFIG_OPTIONS: [&str; 6] = [
    "-c",
    "--config-env",
    "-C",
    "--git-dir",
    "--work-tree",
    "--exec-path",
];

/// git subcommands that run a command from their arguments or change configuration that later
/// runs commands.
const GIT_RUNNING_SUBCOMMANDS: [&str; 7] = [
    "config",
    "difftool",
    "mergetool",
    "filter-branch",
    "send-email",
    "bisect",
    "submodule",
];

/// Options of git subcommands that name a program to run.
const GIT_CODE_OPTIONS: [&str; 10] = [
    "--upload-pack",
    "--receive-pack",
    "--exec",
    "--config",
    "--template",
    "--open-files-in-pager",
    "--extcmd",
    "--ext-diff",
    "-x",
    "-O",
];

/// Whether the command whose words are `words` (quotes removed) may run another program or
/// command through its arguments.
pub fn runs_other_code(words: &[&str]) -> bool {
    let Some(program) = words.first().map(|word| basename(word)) else {
        return false;
    };
    let arguments = &words[1..];
    if RUNNERS.contains(&program) {
        return true;
    }
    if program == "git" {
        return git_runs_other_code(arguments);
    }
    CODE_OPTIONS
        .iter()
        .find(|(name, _)| *name == program)
        .is_some_and(|(_, options)| {
            arguments
                .iter()
                .any(|word| options.iter().any(|option| is_option(word, option)))
        })
}

fn git_runs_other_code(arguments: &[&str]) -> bool {
    let subcommand = arguments.iter().position(|word| !word.starts_with('-'));
    let globals = &arguments[..subcommand.unwrap_or(arguments.len())];
    if globals.iter().any(|word| {
        GIT_CONFIG_OPTIONS
            .iter()
            .any(|option| is_option(word, option))
    }) {
        return true;
    }
    let Some(index) = subcommand else {
        return false;
    };
    if GIT_RUNNING_SUBCOMMANDS.contains(&arguments[index]) {
        return true;
    }
    let rest = &arguments[index + 1..];
    let clone_upload = arguments[index] == "clone" && rest.iter().any(|w| is_option(w, "-u"));
    clone_upload
        || rest.iter().any(|word| {
            GIT_CODE_OPTIONS
                .iter()
                .any(|option| is_option(word, option))
        })
}

/// `word` is `option`, `option=value`, or for a two-character option a cluster of short options
/// containing it, or it with its value attached (`-Ifoo`, `-avze`).
fn is_option(word: &str, option: &str) -> bool {
    if word == option {
        return true;
    }
    if option.len() == 2 && !word.starts_with("--") {
        let letter = &option[1..];
        return word.starts_with('-') && word[1..].contains(letter);
    }
    word.strip_prefix(option)
        .is_some_and(|rest| rest.starts_with('='))
}

fn basename(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

#[cfg(test)]
mod tests {
    use super::runs_other_code;

    fn runs(line: &str) -> bool {
        runs_other_code(&line.split(' ').collect::<Vec<_>>())
    }

    #[test]
    fn known_indirections_are_found() {
        for line in [
            "git -c core.fsmonitor=x status",
            "git -ccore.pager=x log",
            "git --config-env=core.pager=X log",
            "git -C /elsewhere status",
            "git --git-dir=/x/.git status",
            "git -c alias.z=!cmd z",
            "/usr/bin/git -c a=b status",
            "git config core.fsmonitor x",
            "git clone -u x repo",
            "git clone --upload-pack=x repo",
            "git fetch --upload-pack x",
            "git push --receive-pack=x",
            "git rebase -x make",
            "git rebase --exec=make",
            "git grep -O foo",
            "git submodule foreach x",
            "git difftool",
            "find . -exec rm {} ;",
            "find . -name a -execdir x ;",
            "rg --pre=x foo",
            "tar -xIzstd -f a",
            "tar --to-command=x -xf a",
            "rsync -avze x a b",
            "ssh -oProxyCommand=x host",
            "env curl x",
            "xargs curl",
            "sh -c x",
            "timeout 5 curl x",
        ] {
            assert!(runs(line), "{line}");
        }
    }

    #[test]
    fn ordinary_commands_are_not() {
        for line in [
            "git status",
            "git status --short",
            "git log --oneline -n 5",
            "git diff --stat",
            "git add -u",
            "git commit -m x",
            "git --version",
            "find . -name a",
            "rg foo",
            "tar -xvf a.tar",
            "rsync -avz a b",
            "ls -la",
            "cargo test",
        ] {
            assert!(!runs(line), "{line}");
        }
    }
}
