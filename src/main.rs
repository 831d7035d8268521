//! The `egress-proxy` binary: parse the command line, start logging, dispatch, and map
//! the outcome to an exit code (0 ok, 1 denied or findings, 2 error; `run` exits with its
//! command's status, 125-127 for its own errors).

#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;
use egress_proxy::cli::{
    ApproveArgs, AuditCommand, CaCommand, CheckArgs, CheckFormat, Cli, Command, DiffArgs,
    DiffFormat, LintArgs, LintFormat, ProbeArgs, ReplayArgs, RunArgs, ServeArgs, SuggestArgs,
    SuggestFormat, SummarizeArgs, SummaryFormat, VerifyArgs, WatchArgs,
};
use egress_proxy::config::{
    ApproveConfig, CheckConfig, InitConfig, ProbeConfig, RulesConfig, RunConfig, ServeConfig,
    WatchConfig,
};
use egress_proxy::lint::{self, Severity};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version are not errors; every usage error is exit 2, except
            // `run`'s: 125, which CMD's own status cannot be mistaken for.
            let run = std::env::args_os()
                .nth(1)
                .is_some_and(|a| a == "run" || a == "__jail-init");
            let usage = if run { 125 } else { 2 };
            return ExitCode::from(if e.use_stderr() { usage } else { 0 });
        }
    };
    // `run`'s standard error is CMD's too: only warnings and errors by default.
    let default_log = if matches!(cli.command, Command::Run(_)) {
        "warn"
    } else {
        "info"
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("EGRESS_PROXY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log)),
        )
        .init();
    match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Check(args) => check(args),
        Command::Lint(args) => lint(&args),
        Command::Audit(args) => match args.command {
            AuditCommand::Summarize(args) => summarize(&args),
            AuditCommand::Suggest(args) => suggest(&args),
            AuditCommand::Replay(args) => replay(&args),
            AuditCommand::Verify(args) => verify(&args),
            AuditCommand::Keygen { dir } => match egress_proxy::review::verify::keygen(&dir) {
                Ok((private, public)) => {
                    println!(
                        "wrote {} (serve --audit-signing-key) and {} (audit verify --public-key)",
                        private.display(),
                        public.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            },
        },
        Command::Diff(args) => diff(&args),
        Command::Run(args) => run(*args),
        Command::Rules(args) => rules(&RulesConfig::from(args)),
        Command::Watch(args) => watch(args),
        Command::Approve(args) => approve(args),
        Command::Probe(args) => probe(args),
        Command::Ca(args) => match args.command {
            CaCommand::Init { dir } => match egress_proxy::tls::ca::init(&dir) {
                Ok(cert) => {
                    println!(
                        "wrote {} and its key; clients must trust {}",
                        dir.display(),
                        cert.display()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            },
        },
        Command::JailInit(args) => {
            ExitCode::from(egress_proxy::run::init_main(InitConfig::from(args)))
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let config = match ServeConfig::from_args(args) {
        Ok(config) => config,
        Err(e) => return fail(e),
    };
    // This thread runs the control plane, the audit writer and signals; proxied
    // connections run on the worker threads (`proxy::workers`).
    on_this_thread(egress_proxy::serve::run(config), "")
}

fn watch(args: WatchArgs) -> ExitCode {
    let config = match WatchConfig::from_args(args) {
        Ok(config) => config,
        Err(e) => return fail(e),
    };
    on_this_thread(egress_proxy::watch::run(&config), "watch: ")
}

fn approve(args: ApproveArgs) -> ExitCode {
    let config = match ApproveConfig::from_args(args) {
        Ok(config) => config,
        Err(e) => return fail(e),
    };
    on_this_thread(egress_proxy::watch::approve::run(&config), "approve: ")
}

/// Run `work` to its end on a runtime of this thread; its error, after `prefix`, is
/// exit 2.
fn on_this_thread<E: std::fmt::Display>(
    work: impl std::future::Future<Output = Result<(), E>>,
    prefix: &str,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    match runtime.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(format!("{prefix}{e}")),
    }
}

/// `run`: its flags' errors are its own (exit 125, never a status CMD could have).
fn run(args: RunArgs) -> ExitCode {
    match RunConfig::from_args(args) {
        Ok(config) => ExitCode::from(egress_proxy::run::main(config)),
        Err(e) => {
            eprintln!("egress-proxy: run: error: {e}");
            ExitCode::from(125)
        }
    }
}

/// `rules`: print the ruleset, or apply it (`--apply`: 2 when it cannot be applied).
fn rules(config: &RulesConfig) -> ExitCode {
    if config.apply {
        return match egress_proxy::run::apply_rules(config) {
            Ok(()) => {
                eprintln!("egress-proxy: rules: applied table inet egress_proxy");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("egress-proxy: rules --apply: error: {e}");
                ExitCode::from(2)
            }
        };
    }
    match emit(&egress_proxy::run::rules(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("egress-proxy: error: {e}");
    ExitCode::from(2)
}

/// Write to standard output; a closed pipe is not worth a panic.
fn emit(s: &str) -> Result<(), ExitCode> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| fail(format!("cannot write the output: {e}")))
}

fn check(args: CheckArgs) -> ExitCode {
    let config = match CheckConfig::from_args(args) {
        Ok(config) => config,
        Err(e) => return fail(e),
    };
    let (results, output) = match egress_proxy::check::run(&config) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    if let Err(code) = emit(&output) {
        return code;
    }
    if results.iter().all(|r| r.allowed()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `probe`: 0 when nothing unexpected is open, 1 when something is (or an `--allowed`
/// URL is not reached), 2 when the probe itself cannot run.
fn probe(args: ProbeArgs) -> ExitCode {
    let config = match ProbeConfig::from_args(args) {
        Ok(config) => config,
        Err(e) => return fail(e),
    };
    match egress_proxy::probe::run(&config) {
        Ok((output, failing)) => emit_then(&output, failing),
        Err(e) => fail(e),
    }
}

fn lint(args: &LintArgs) -> ExitCode {
    let report = match lint::run(&args.paths, args.org.as_deref()) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let output = match args.format {
        LintFormat::Text => lint::format::text(&report),
        LintFormat::Json => lint::format::json(&report),
        LintFormat::Sarif => lint::sarif::sarif(&report),
    };
    if let Err(code) = emit(&output) {
        return code;
    }
    if args.format == LintFormat::Text {
        for note in &report.notes {
            eprintln!("note: {note}");
        }
        eprintln!("{}", lint::format::summary(&report));
    }
    let errors = report.count(Severity::Error);
    let warnings = report.count(Severity::Warning);
    if errors > 0 || (args.deny_warnings && warnings > 0) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn summarize(args: &SummarizeArgs) -> ExitCode {
    let summary = match egress_proxy::review::summarize(&args.files, args.since.as_deref()) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let output = match args.format {
        SummaryFormat::Text => egress_proxy::review::text::render(&summary),
        SummaryFormat::Json => serde_json::to_string_pretty(&summary).expect("serialisable") + "\n",
        SummaryFormat::Html => egress_proxy::review::html::render(&summary),
    };
    match emit(&output) {
        Ok(()) => ExitCode::SUCCESS,
        Err(code) => code,
    }
}

/// Exit 1 when `changed`, else 0, once `output` is written.
fn emit_then(output: &str, changed: bool) -> ExitCode {
    match emit(output) {
        Err(code) => code,
        Ok(()) if changed => ExitCode::from(1),
        Ok(()) => ExitCode::SUCCESS,
    }
}

fn diff(args: &DiffArgs) -> ExitCode {
    use egress_proxy::diff;
    let d = match diff::run(&args.old, &args.new) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let output = match args.format {
        DiffFormat::Text => diff::format::text(&d),
        DiffFormat::Markdown => diff::format::markdown(&d),
        DiffFormat::Json => diff::format::json(&d),
        DiffFormat::Sarif => diff::sarif::sarif(&d),
    };
    emit_then(&output, d.widens())
}

fn suggest(args: &SuggestArgs) -> ExitCode {
    use egress_proxy::review::suggest;
    let s = match suggest::run(&args.org.path, &args.files) {
        Ok(s) => s,
        Err(e) => return fail(e),
    };
    let output = match args.format {
        SuggestFormat::Json => {
            serde_json::to_string_pretty(&s.policy()).expect("serialisable") + "\n"
        }
        SuggestFormat::Text => suggest::text(&s),
    };
    eprint!("{}", suggest::left_out(&s));
    emit_then(&output, false)
}

fn replay(args: &ReplayArgs) -> ExitCode {
    use egress_proxy::review::replay;
    let policy = &args.policy;
    let r = match replay::replay(&policy.org.path, policy.policy.as_deref(), &args.files) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    let output = match args.format {
        CheckFormat::Text => replay::text(&r),
        CheckFormat::Json => serde_json::to_string_pretty(&r).expect("serialisable") + "\n",
    };
    for w in &r.warnings {
        eprintln!("warning: {w}");
    }
    emit_then(&output, r.changed())
}

fn verify(args: &VerifyArgs) -> ExitCode {
    use egress_proxy::review::verify;
    let report = match verify::verify(&args.files, args.public_key.as_deref()) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    emit_then(&verify::text(&report), !report.intact())
}
