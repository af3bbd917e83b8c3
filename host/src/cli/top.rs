//! `krec top`: a live terminal view of a running host's guests — CPU, reconciles per second,
//! errors, p99, queue depth, memory, rollout phase — read from its admin server's
//! `GET /guests` every `--interval`. Keys sort the table and open one guest's last reconciles.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table, TableState};
use serde_json::Value;

use super::admin_client::{Admin, AdminArgs};

/// `krec top`'s arguments.
#[derive(clap::Args)]
pub(super) struct Args {
    /// How often to ask the host.
    #[arg(long, default_value = "2s", value_parser = super::args::duration)]
    interval: Duration,
    #[command(flatten)]
    admin: AdminArgs,
}

pub(super) fn execute(args: Args) -> ExitCode {
    super::exit_code("top", run(&args))
}

/// What the table is sorted by (descending; names ascending).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sort {
    Cpu,
    Rate,
    Errors,
    P99,
    Queue,
    Memory,
    Name,
}

impl Sort {
    /// The sort a key asks for.
    fn of_key(key: char) -> Option<Sort> {
        Some(match key {
            'c' => Sort::Cpu,
            'r' => Sort::Rate,
            'e' => Sort::Errors,
            'p' => Sort::P99,
            'd' => Sort::Queue,
            'm' => Sort::Memory,
            'n' => Sort::Name,
            _ => return None,
        })
    }

    /// The column it sorts (an index into [`HEADER`]).
    fn column(self) -> usize {
        match self {
            Sort::Name => 0,
            Sort::Cpu => 2,
            Sort::Rate => 3,
            Sort::Errors => 4,
            Sort::P99 => 5,
            Sort::Queue => 6,
            Sort::Memory => 7,
        }
    }
}

const HEADER: [&str; 9] = [
    "GUEST", "STATE", "CPU", "REC/S", "ERR/S", "P99", "QUEUE", "MEMORY", "ROLLOUT",
];

/// One guest's line: its figures over the last interval.
#[derive(Clone, Debug, PartialEq)]
struct GuestRow {
    name: String,
    state: String,
    /// Cores (CPU seconds per second), `wasm` and `host` together.
    cpu: f64,
    reconciles_per_second: f64,
    /// Errors and traps per second.
    errors_per_second: f64,
    /// The 99th percentile of the interval's reconcile times, seconds (`None`: none ended).
    p99: Option<f64>,
    queue: u64,
    memory: u64,
    rollout: String,
    /// The guest as the host described it (its last reconciles, last error, rollout).
    detail: Value,
}

/// The `q` quantile of a histogram of `counts` per bucket (not cumulative; the last over
/// every bound) with upper `bounds`, interpolated inside its bucket as Prometheus'
/// `histogram_quantile` does; `None` without a count.
fn quantile(q: f64, bounds: &[f64], counts: &[u64]) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, &count) in counts.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let reached = (below + count) as f64;
        if count > 0 && reached >= rank {
            let Some(&upper) = bounds.get(i) else {
                // Over the last bound: as Prometheus says, the last bound.
                return bounds.last().copied();
            };
            let lower = if i == 0 { 0.0 } else { bounds[i - 1] };
            #[allow(clippy::cast_precision_loss)]
            let within = (rank - below as f64) / count as f64;
            return Some(lower + (upper - lower) * within);
        }
        below += count;
    }
    bounds.last().copied()
}

fn number(value: &Value) -> f64 {
    value.as_f64().unwrap_or(0.0)
}

fn counts(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .map(|a| a.iter().map(|v| v.as_u64().unwrap_or(0)).collect())
        .unwrap_or_default()
}

/// The rows of `now`, with rates over the time since `before` (the previous answer, if any;
/// without one, rates since each guest's start are unknown: 0).
fn rows(before: Option<&Value>, now: &Value) -> Vec<GuestRow> {
    let bounds: Vec<f64> = now["durationBounds"]
        .as_array()
        .map(|a| a.iter().map(number).collect())
        .unwrap_or_default();
    #[allow(clippy::cast_precision_loss)]
    let seconds = before
        .map(|b| (number(&now["unixMs"]) - number(&b["unixMs"])) / 1000.0)
        .filter(|s| *s > 0.0);
    let previous = |name: &str| {
        before?["guests"]
            .as_array()?
            .iter()
            .find(|g| g["name"] == name)
            .map(|g| g["running"].clone())
            .filter(Value::is_object)
    };
    let mut rows = Vec::new();
    for guest in now["guests"].as_array().into_iter().flatten() {
        let name = guest["name"].as_str().unwrap_or_default().to_owned();
        let running = &guest["running"];
        let then = previous(&name);
        let rate = |now: f64, then: f64| match seconds {
            Some(s) => ((now - then) / s).max(0.0),
            None => 0.0,
        };
        let cpu = |r: &Value| number(&r["cpuSeconds"]["wasm"]) + number(&r["cpuSeconds"]["host"]);
        let failures =
            |r: &Value| number(&r["reconciles"]["errors"]) + number(&r["reconciles"]["traps"]);
        let then = then.as_ref();
        let p99 = {
            let now = counts(&running["durations"]);
            let window: Vec<u64> = match then.map(|t| counts(&t["durations"])) {
                Some(then) if then.len() == now.len() => now
                    .iter()
                    .zip(&then)
                    .map(|(n, t)| n.saturating_sub(*t))
                    .collect(),
                _ => now,
            };
            quantile(0.99, &bounds, &window)
        };
        rows.push(GuestRow {
            name,
            state: guest["state"].as_str().unwrap_or("?").to_owned(),
            cpu: rate(cpu(running), then.map_or(cpu(running), cpu)),
            reconciles_per_second: rate(
                number(&running["reconciles"]["total"]),
                then.map_or(number(&running["reconciles"]["total"]), |t| {
                    number(&t["reconciles"]["total"])
                }),
            ),
            errors_per_second: rate(failures(running), then.map_or(failures(running), failures)),
            p99,
            queue: running["queueDepth"].as_u64().unwrap_or(0),
            memory: running["memoryBytes"].as_u64().unwrap_or(0),
            rollout: running["rollout"]["phase"]
                .as_str()
                .unwrap_or("-")
                .to_owned(),
            detail: guest.clone(),
        });
    }
    rows
}

/// `rows` in `sort`'s order.
fn sorted(mut rows: Vec<GuestRow>, sort: Sort) -> Vec<GuestRow> {
    let key = |row: &GuestRow| match sort {
        Sort::Cpu => row.cpu,
        Sort::Rate => row.reconciles_per_second,
        Sort::Errors => row.errors_per_second,
        Sort::P99 => row.p99.unwrap_or(-1.0),
        #[allow(clippy::cast_precision_loss)]
        Sort::Queue => row.queue as f64,
        #[allow(clippy::cast_precision_loss)]
        Sort::Memory => row.memory as f64,
        Sort::Name => 0.0,
    };
    rows.sort_by(|a, b| key(b).total_cmp(&key(a)).then_with(|| a.name.cmp(&b.name)));
    rows
}

fn bytes(n: u64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let n = n as f64;
    if n >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1}Gi", n / (1024.0 * 1024.0 * 1024.0))
    } else if n >= 1024.0 * 1024.0 {
        format!("{:.1}Mi", n / (1024.0 * 1024.0))
    } else {
        format!("{:.0}Ki", n / 1024.0)
    }
}

fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.1}ms", s * 1000.0)
    } else {
        format!("{s:.2}s")
    }
}

/// What the screen shows: the table, or one guest's last reconciles.
struct Screen {
    sort: Sort,
    table: TableState,
    /// The guest whose reconciles are open.
    open: Option<String>,
    rows: Vec<GuestRow>,
    /// The last answer and when it came.
    last: Option<Value>,
    /// Why the last refresh failed, if it did (the figures shown are older).
    problem: Option<String>,
    admin: String,
}

impl Screen {
    fn refreshed(&mut self, answer: anyhow::Result<Value>) {
        match answer {
            Ok(now) => {
                let rows = rows(self.last.as_ref(), &now);
                self.rows = sorted(rows, self.sort);
                self.last = Some(now);
                self.problem = None;
            }
            Err(err) => self.problem = Some(format!("{err:#}")),
        }
        if self.table.selected().is_none() && !self.rows.is_empty() {
            self.table.select(Some(0));
        }
    }

    /// Act on `key`; whether to quit.
    fn key(&mut self, key: KeyCode, modifiers: KeyModifiers) -> bool {
        match key {
            KeyCode::Char('q') => return true,
            KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => return true,
            KeyCode::Esc | KeyCode::Backspace | KeyCode::Left => self.open = None,
            KeyCode::Enter | KeyCode::Right => {
                self.open = self
                    .table
                    .selected()
                    .and_then(|i| self.rows.get(i))
                    .map(|r| r.name.clone());
            }
            KeyCode::Down | KeyCode::Char('j') => self.table.select_next(),
            KeyCode::Up | KeyCode::Char('k') => self.table.select_previous(),
            KeyCode::Char(c) => {
                if let Some(sort) = Sort::of_key(c) {
                    self.sort = sort;
                    self.rows = sorted(std::mem::take(&mut self.rows), sort);
                }
            }
            _ => {}
        }
        false
    }

    fn draw(&mut self, frame: &mut ratatui::Frame<'_>) {
        let [body, footer] =
            Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(frame.area());
        let status = match &self.problem {
            Some(problem) => format!(" {problem}"),
            None => format!(" {} guests on {}", self.rows.len(), self.admin),
        };
        let open = self
            .open
            .as_ref()
            .and_then(|name| self.rows.iter().find(|r| &r.name == name));
        match open {
            Some(row) => {
                frame.render_widget(reconciles(row), body);
                let help = format!("{status} · esc back · q quit");
                frame.render_widget(Paragraph::new(help), footer);
            }
            None => {
                let table = self.table();
                frame.render_stateful_widget(table, body, &mut self.table);
                let help = format!(
                    "{status} · sort: c cpu, r rec/s, e err/s, p p99, d queue, m memory, n name · ↑↓ enter: a guest's reconciles · q quit"
                );
                frame.render_widget(Paragraph::new(help), footer);
            }
        }
    }

    fn table(&self) -> Table<'static> {
        let header = header_row(HEADER.iter().enumerate().map(|(i, h)| {
            if i == self.sort.column() {
                format!("{h}▼")
            } else {
                (*h).to_owned()
            }
        }));
        let rows = self.rows.iter().map(|r| {
            Row::new(vec![
                r.name.clone(),
                r.state.clone(),
                format!("{:.3}", r.cpu),
                format!("{:.1}", r.reconciles_per_second),
                format!("{:.2}", r.errors_per_second),
                r.p99.map_or_else(|| "-".to_owned(), seconds),
                r.queue.to_string(),
                bytes(r.memory),
                r.rollout.clone(),
            ])
        });
        Table::new(
            rows,
            [
                Constraint::Min(16),
                Constraint::Length(8),
                Constraint::Length(7),
                Constraint::Length(8),
                Constraint::Length(7),
                Constraint::Length(9),
                Constraint::Length(6),
                Constraint::Length(8),
                Constraint::Min(10),
            ],
        )
        .header(header)
        .row_highlight_style(Style::new().add_modifier(Modifier::REVERSED))
        .block(Block::bordered().title(" krec top "))
    }
}

/// One guest's last reconciles, newest first, with its last error.
fn reconciles(row: &GuestRow) -> Table<'static> {
    let running = &row.detail["running"];
    let mut title = format!(
        " {} · {} · version {} · recent reconciles ",
        row.name,
        row.state,
        running["version"].as_u64().unwrap_or(0)
    );
    if let Some(reason) = row.detail["reason"].as_str() {
        title = format!(" {} · {} · {reason} ", row.name, row.state);
    }
    let rows = running["recent"].as_array().into_iter().flatten().map(|r| {
        let ended = r["endedUnixMs"]
            .as_i64()
            .and_then(|ms| jiff::Timestamp::from_millisecond(ms).ok())
            .map(|t| t.strftime("%H:%M:%S").to_string())
            .unwrap_or_default();
        Row::new(vec![
            ended,
            r["key"].as_str().unwrap_or_default().to_owned(),
            r["result"].as_str().unwrap_or_default().to_owned(),
            seconds(number(&r["seconds"])),
            r["message"].as_str().unwrap_or_default().replace('\n', " "),
        ])
    });
    let mut block = Block::bordered().title(title);
    if let Some(error) = running["lastError"]["message"].as_str() {
        block = block.title_bottom(Line::from(format!(" last error: {error} ")));
    }
    Table::new(
        rows,
        [
            Constraint::Length(8),
            Constraint::Min(20),
            Constraint::Length(13),
            Constraint::Length(9),
            Constraint::Min(20),
        ],
    )
    .header(header_row(
        ["ENDED", "KEY", "RESULT", "TOOK", "ERROR"].map(str::to_owned),
    ))
    .block(block)
}

/// A table's header: its column names in bold.
fn header_row(names: impl IntoIterator<Item = String>) -> Row<'static> {
    Row::new(names).style(Style::new().add_modifier(Modifier::BOLD))
}

fn run(args: &Args) -> anyhow::Result<()> {
    let admin = Admin::new(&args.admin);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let fetch = || -> anyhow::Result<Value> {
        runtime.block_on(async {
            let response = admin.get("/guests").await?;
            Ok(response.json::<Value>().await?)
        })
    };
    // The first answer before the screen is taken: a host that cannot be reached is said
    // plainly, on the terminal as it was.
    let first = fetch()?;
    let mut screen = Screen {
        sort: Sort::Cpu,
        table: TableState::default(),
        open: None,
        rows: Vec::new(),
        last: None,
        problem: None,
        admin: admin.base().to_owned(),
    };
    screen.refreshed(Ok(first));
    let mut terminal = ratatui::init();
    let result = (|| -> anyhow::Result<()> {
        let mut next = Instant::now() + args.interval;
        loop {
            terminal.draw(|frame| screen.draw(frame))?;
            let wait = next.saturating_duration_since(Instant::now());
            if event::poll(wait)? {
                if let Event::Key(key) = event::read()?
                    && key.kind == KeyEventKind::Press
                    && screen.key(key.code, key.modifiers)
                {
                    return Ok(());
                }
                continue;
            }
            screen.refreshed(fetch());
            next = Instant::now() + args.interval;
        }
    })();
    ratatui::restore();
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(unix_ms: u64, total: u64, cpu: f64, durations: [u64; 3]) -> Value {
        json!({
            "unixMs": unix_ms,
            "durationBounds": [0.01, 0.1],
            "guests": [
                {"name": "busy", "state": "Running", "running": {
                    "reconciles": {"total": total, "errors": 1, "traps": 0},
                    "cpuSeconds": {"wasm": cpu, "host": 0.0},
                    "durations": durations, "queueDepth": 3, "memoryBytes": 2097152,
                    "rollout": {"phase": "Shadow"}, "recent": []}},
                {"name": "idle", "state": "Running", "running": {
                    "reconciles": {"total": 5, "errors": 0, "traps": 0},
                    "cpuSeconds": {"wasm": 0.5, "host": 0.0},
                    "durations": [5, 0, 0], "queueDepth": 0, "memoryBytes": 1048576,
                    "recent": []}},
                {"name": "broken", "state": "Refused", "reason": "no such kind"}
            ]
        })
    }

    #[test]
    fn rates_and_the_p99_should_be_over_the_interval_between_two_answers() {
        let before = answer(10_000, 100, 1.0, [100, 0, 0]);
        let now = answer(12_000, 300, 2.0, [100, 150, 50]);
        let rows = sorted(rows(Some(&before), &now), Sort::Cpu);
        assert_eq!(
            rows.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
            ["busy", "broken", "idle"]
        );
        let busy = &rows[0];
        assert!((busy.reconciles_per_second - 100.0).abs() < 1e-9);
        assert!((busy.cpu - 0.5).abs() < 1e-9);
        assert_eq!(busy.errors_per_second, 0.0);
        // The interval's 200 reconciles: 150 under 100 ms, 50 over it: its p99 is the last
        // bound, not the 10 ms the first 100 (before the interval) would pull it towards.
        assert_eq!(busy.p99, Some(0.1));
        assert_eq!(busy.rollout, "Shadow");
        assert_eq!(busy.queue, 3);
        let broken = rows.iter().find(|r| r.name == "broken").expect("broken");
        assert_eq!(broken.state, "Refused");
        assert_eq!(broken.p99, None);
    }

    #[test]
    fn the_quantile_should_interpolate_inside_its_bucket() {
        let bounds = [0.01, 0.1, 1.0];
        assert_eq!(quantile(0.99, &bounds, &[0, 0, 0, 0]), None);
        // 100 in (0.01, 0.1]: the p50 is halfway through it.
        let p50 = quantile(0.5, &bounds, &[0, 100, 0, 0]).expect("p50");
        assert!((p50 - 0.055).abs() < 1e-9, "{p50}");
        assert_eq!(quantile(0.99, &bounds, &[0, 0, 0, 10]), Some(1.0));
    }

    #[test]
    fn keys_should_sort_open_a_guest_and_quit() {
        let mut screen = Screen {
            sort: Sort::Cpu,
            table: TableState::default(),
            open: None,
            rows: Vec::new(),
            last: None,
            problem: None,
            admin: "http://127.0.0.1:8080".into(),
        };
        screen.refreshed(Ok(answer(10_000, 100, 1.0, [100, 0, 0])));
        screen.refreshed(Ok(answer(12_000, 300, 2.0, [100, 150, 50])));
        assert!(!screen.key(KeyCode::Char('m'), KeyModifiers::NONE));
        assert_eq!(screen.rows[0].name, "busy", "most memory first");
        assert!(!screen.key(KeyCode::Char('n'), KeyModifiers::NONE));
        assert_eq!(screen.rows[0].name, "broken", "by name");
        screen.key(KeyCode::Down, KeyModifiers::NONE);
        screen.key(KeyCode::Enter, KeyModifiers::NONE);
        assert_eq!(screen.open.as_deref(), Some("busy"));
        screen.key(KeyCode::Esc, KeyModifiers::NONE);
        assert_eq!(screen.open, None);
        let mut terminal =
            ratatui::Terminal::new(ratatui::backend::TestBackend::new(140, 10)).expect("terminal");
        terminal.draw(|f| screen.draw(f)).expect("draw");
        let shown = format!("{:?}", terminal.backend().buffer());
        assert!(shown.contains("GUEST▼"), "{shown}");
        assert!(screen.key(KeyCode::Char('q'), KeyModifiers::NONE));
    }
}
