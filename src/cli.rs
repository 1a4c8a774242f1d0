//! Command-line interface: `serve`, `migrate` and operator commands.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::{Config, Overrides, SETTINGS};
use crate::db;
use crate::plans::Role;
use crate::pricing_report;
use crate::Surface;
use spendgate_llm::pricing::PricingTable;

#[derive(Debug, Parser)]
#[command(
    name = "spendgate",
    version,
    about = "Spend-governance gateway for AI agents",
    long_about = "spendgate sits between AI agents and AI providers (OpenAI, Anthropic, Gemini), \
                  records the cost of every call in microdollars and enforces budgets.\n\n\
                  Configuration comes from an optional spendgate.toml, then SPENDGATE_* \
                  environment variables, then flags.",
    after_help = settings_help()
)]
pub struct Cli {
    /// Config file (default ./spendgate.toml when present).
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Database URL: sqlite://PATH (default sqlite://./spendgate.db) or postgres://…
    #[arg(long, global = true, value_name = "URL")]
    pub database_url: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the service: control plane (/api) and proxy (/v1, /health) listeners.
    /// Migrations are applied first. Stops gracefully on SIGINT/SIGTERM.
    Serve {
        /// Start only one surface, for split deployments.
        #[arg(long, value_enum)]
        only: Option<Surface>,
        /// Control-plane listen address (default 127.0.0.1:3000).
        #[arg(long, value_name = "HOST:PORT")]
        control_addr: Option<String>,
        /// Proxy listen address (default 127.0.0.1:8787).
        #[arg(long, value_name = "HOST:PORT")]
        proxy_addr: Option<String>,
        /// Local development mode (http webhook targets, non-Secure cookies).
        #[arg(long)]
        dev: bool,
    },
    /// Apply pending database migrations and exit.
    Migrate,
    /// Inspect the model price table.
    Pricing {
        #[command(subcommand)]
        action: PricingCommand,
    },
    /// Manage dashboard users (works while the server runs on the same database).
    User {
        #[command(subcommand)]
        action: UserCommand,
    },
    /// Manage organizations (works while the server runs on the same database).
    Org {
        #[command(subcommand)]
        action: OrgCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum OrgCommand {
    /// Set an organization's tier. Running servers apply it within about a second.
    SetPlan {
        /// Organization name, or its id (svc_org_…) when several share the name.
        #[arg(long)]
        org: String,
        /// free, pro, scale or enterprise.
        #[arg(long)]
        plan: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PricingCommand {
    /// Show the table's size and age, and the models of every organization charged at the
    /// unknown-model price in the last 7 days that the table (with `pricing_file`) still
    /// does not know. Exits 0 either way.
    Check {
        /// Print the report as JSON (the `pricing` object of `GET /v1/policy`).
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user and add it to an organization, creating the organization when
    /// it does not exist yet.
    Create {
        #[arg(long)]
        email: String,
        #[arg(long)]
        password: String,
        /// Organization name (default: "<email>'s organization").
        #[arg(long)]
        org: Option<String>,
        /// Role in the organization: viewer, member, admin or owner.
        #[arg(long, default_value = "owner")]
        role: String,
    },
}

fn settings_help() -> String {
    let mut s = String::from("Settings (file key / environment variable):\n");
    for (name, help) in SETTINGS {
        s.push_str(&format!("  {name:<26} SPENDGATE_{:<28} {help}\n", name.to_uppercase()));
    }
    s
}

impl Cli {
    pub fn overrides(&self) -> Overrides {
        let mut values = BTreeMap::new();
        if let Some(url) = &self.database_url {
            values.insert("database_url".to_owned(), url.clone());
        }
        if let Command::Serve { control_addr, proxy_addr, dev, .. } = &self.command {
            if let Some(a) = control_addr {
                values.insert("control_addr".to_owned(), a.clone());
            }
            if let Some(a) = proxy_addr {
                values.insert("proxy_addr".to_owned(), a.clone());
            }
            if *dev {
                values.insert("dev".to_owned(), "1".to_owned());
            }
        }
        Overrides { config_file: self.config.clone(), values }
    }
}

pub async fn migrate(config: &Config) -> Result<(), String> {
    let applied = db::migrate(&config.database_url).await?;
    println!("applied {} migration(s)", applied.len());
    Ok(())
}

pub async fn org(config: &Config, action: OrgCommand) -> Result<(), String> {
    match action {
        OrgCommand::SetPlan { org, plan } => {
            let plan: crate::plans::Plan = plan
                .parse()
                .map_err(|()| format!("invalid --plan {plan:?}: free, pro, scale or enterprise"))?;
            db::migrate(&config.database_url).await?;
            let pool = db::Pool::connect(&config.database_url, 1)?;
            match db::orgs::set_plan(&pool, &org, plan.as_str()).await.map_err(|e| e.to_string())? {
                db::orgs::PlanChange::Changed { id, name } => {
                    println!("organization svc_org_{id} ({name}) is now on the {} plan", plan.as_str());
                    Ok(())
                }
                db::orgs::PlanChange::NotFound => Err(format!("no organization named {org:?}")),
                db::orgs::PlanChange::Ambiguous(n) => {
                    Err(format!("{n} organizations are named {org:?}; give its id (svc_org_…) instead"))
                }
            }
        }
    }
}

pub async fn user(config: &Config, action: UserCommand) -> Result<(), String> {
    match action {
        UserCommand::Create { email, password, org, role } => {
            let role: Role = role
                .parse()
                .map_err(|()| format!("invalid --role {role:?}: viewer, member, admin or owner"))?;
            db::migrate(&config.database_url).await?;
            let pool = db::Pool::connect(&config.database_url, 1)?;
            let org_name = org.unwrap_or_else(|| format!("{email}'s organization"));
            let created = crate::auth::users::create_user_in_org(
                &pool, config, &email, &password, None, &org_name, role,
            )
            .await
            .map_err(|e| e.message)?;
            println!(
                "created user svc_usr_{} ({email}) as {} of organization svc_org_{}{}",
                created.user_id,
                role.as_str(),
                created.org_id,
                if created.org_created { " (new)" } else { "" }
            );
            Ok(())
        }
    }
}

pub async fn pricing(config: &Config, action: PricingCommand) -> Result<(), String> {
    match action {
        PricingCommand::Check { json } => {
            let table = PricingTable::load(config.pricing_file.as_deref(), &config.named_formats())?;
            db::migrate(&config.database_url).await?;
            let pool = db::Pool::connect(&config.database_url, 1)?;
            let report = pricing_report::report(&pool, &table, None, crate::util::time::now_ms())
                .await
                .map_err(|e| e.to_string())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
            } else {
                print!("{}", render_report(&report, config.pricing_file.as_deref()));
            }
            Ok(())
        }
    }
}

/// The human-readable form of `spendgate pricing check`.
fn render_report(report: &pricing_report::PricingReport, file: Option<&std::path::Path>) -> String {
    let checked = match (&report.checked_at, report.age_days) {
        (Some(day), Some(age)) => format!("prices checked {day} ({age} days ago)"),
        _ => "prices never checked".to_owned(),
    };
    let source = file.map_or_else(|| "built in".to_owned(), |f| format!("built in + {}", f.display()));
    let mut out = format!("pricing table: {} models ({source}), {checked}\n", report.models);
    out.push_str(&render_runtime(&report.runtime_prices));
    if report.unpriced_models.is_empty() {
        out.push_str(&format!("no unpriced model seen in the last {} days\n", report.window_days));
        return out;
    }
    out.push_str(&format!(
        "{} unpriced model(s) seen in the last {} days, charged at their provider's fallback price:\n",
        report.unpriced_models.len(),
        report.window_days
    ));
    out.push_str(&format!("  {:<10} {:<40} {:>8}  {}\n", "PROVIDER", "MODEL", "CALLS", "LAST SEEN"));
    for m in &report.unpriced_models {
        let last = m.last_seen.as_deref().unwrap_or("-");
        let runtime = report.runtime_prices.iter().any(|r| r.provider == m.provider && r.model == m.model);
        let note = if runtime { "  (priced at run time by some organization)" } else { "" };
        out.push_str(&format!("  {:<10} {:<40} {:>8}  {last}{note}\n", m.provider, m.model, m.calls));
    }
    out
}

/// The runtime prices part of `spendgate pricing check`: set per organization
/// through `PUT /api/model-prices/{provider}/{model}`, read from the database.
fn render_runtime(prices: &[pricing_report::RuntimeEntry]) -> String {
    if prices.is_empty() {
        return "no runtime prices set by any organization\n".to_owned();
    }
    let mut out = format!("{} runtime price(s), µ$ per million tokens, over the table:\n", prices.len());
    out.push_str(&format!(
        "  {:<44} {:<10} {:<40} {:>12} {:>12}\n",
        "ORGANIZATION", "PROVIDER", "MODEL", "INPUT", "OUTPUT"
    ));
    for p in prices {
        out.push_str(&format!(
            "  {:<44} {:<10} {:<40} {:>12} {:>12}\n",
            p.org_id, p.provider, p.model, p.input, p.output
        ));
    }
    out
}
