//! The runtime cost of CEL expressions, metered as kube-apiserver meters it (cel-go's cost
//! tracker, `k8s.io/apiserver/pkg/apis/cel`): one expression may cost at most
//! [`PER_CALL_LIMIT`] (`operation cancelled: actual cost limit exceeded`), and the expressions
//! of one admission policy binding, or of one custom resource's validation rules, together at
//! most [`RUNTIME_BUDGET`] (`validation failed due to running out of cost budget, no further
//! validation rules will be run`).
//!
//! The `cel` crate has no cost tracker, so a compiled expression is [`metered`]: each
//! comprehension step and each function call is wrapped in a call of the host's own `@cost`
//! function (a name no rule can write), which charges it — a step what cel-go charges for the
//! reads, selections and calls it evaluates, a call a tenth of the size of the string or list it
//! makes — and stops the evaluation once the expression is over its limit. The figures follow cel-go's within a
//! small factor: what matters is that a rule quadratic in its object is stopped where kube stops
//! it, long before it holds a thread for minutes.

use std::cell::Cell;

use cel::common::ast::{CallExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use cel::extractors::Arguments;
use cel::{ExecutionError, ResolveResult, Value};

/// kube's `PerCallLimit`: the most one evaluation of one expression may cost.
pub const PER_CALL_LIMIT: u64 = 1_000_000;
/// kube's `RuntimeCELCostBudget`: the most the expressions of one policy binding, or the rules
/// of one custom resource, may cost together.
pub const RUNTIME_BUDGET: u64 = 10_000_000;

/// cel-go's error for an expression over [`PER_CALL_LIMIT`].
pub const CALL_LIMIT_EXCEEDED: &str = "operation cancelled: actual cost limit exceeded";
/// kube's error once the [`RUNTIME_BUDGET`] is spent.
pub const BUDGET_EXHAUSTED: &str =
    "validation failed due to running out of cost budget, no further validation rules will be run";

/// The name of the charging function.
pub(super) const COST: &str = "@cost";

/// What the current thread's evaluation has spent.
#[derive(Clone, Copy)]
struct Meter {
    /// Spent by the expression being evaluated.
    call: u64,
    /// Left of the budget of the policy binding or object being evaluated (`None` outside
    /// [`with_budget`]: the per-call limit alone).
    budget: Option<u64>,
}

thread_local! {
    static METER: Cell<Meter> = const { Cell::new(Meter { call: 0, budget: None }) };
}

/// Run `f` with a fresh [`RUNTIME_BUDGET`] for the expressions it evaluates (one policy
/// binding's, one object's rules); the budget in force before is restored after.
pub fn with_budget<R>(f: impl FnOnce() -> R) -> R {
    let outer = METER.with(|m| {
        m.replace(Meter {
            call: 0,
            budget: Some(RUNTIME_BUDGET),
        })
    });
    let result = f();
    METER.with(|m| m.set(outer));
    result
}

/// Whether the current budget is spent (no further rules are run).
pub fn exhausted() -> bool {
    METER.with(|m| m.get().budget == Some(0))
}

/// Spend what is left of the budget: no further rules are run (after an expression over its
/// per-call limit, as kube stops).
pub fn stop() {
    METER.with(|m| {
        let mut meter = m.get();
        meter.budget = meter.budget.map(|_| 0);
        m.set(meter);
    });
}

/// Start metering one expression.
pub(super) fn start_call() {
    METER.with(|m| {
        let mut meter = m.get();
        meter.call = 0;
        m.set(meter);
    });
}

/// End metering one expression: its cost is taken from the budget; [`BUDGET_EXHAUSTED`] when
/// it was more than what was left.
pub(super) fn end_call() -> Result<u64, &'static str> {
    METER.with(|m| {
        let mut meter = m.get();
        let cost = meter.call;
        let Some(left) = meter.budget else {
            return Ok(cost);
        };
        let over = cost > left;
        meter.budget = Some(if over { 0 } else { left - cost });
        m.set(meter);
        if over {
            Err(BUDGET_EXHAUSTED)
        } else {
            Ok(cost)
        }
    })
}

/// The cost of making `value`: a tenth of a string's or list's size.
fn size_cost(value: &Value) -> u64 {
    let size = match value {
        Value::String(s) => s.len(),
        Value::Bytes(b) => b.len(),
        Value::List(items) => items.len(),
        _ => 0,
    };
    u64::try_from(size / 10).unwrap_or(u64::MAX)
}

/// `@cost(weight, value)`: charge `weight` and the size of `value`, answer `value`; stop the
/// evaluation past [`PER_CALL_LIMIT`].
pub(super) fn charge(Arguments(args): Arguments) -> ResolveResult {
    let weight = match args.first() {
        Some(Value::Int(w)) => u64::try_from(*w).unwrap_or(1),
        _ => 1,
    };
    let value = args.get(1).cloned().unwrap_or(Value::Null);
    let over = METER.with(|m| {
        let mut meter = m.get();
        meter.call = meter.call.saturating_add(weight + size_cost(&value));
        m.set(meter);
        meter.call > PER_CALL_LIMIT
    });
    if over {
        return Err(ExecutionError::function_error(COST, CALL_LIMIT_EXCEEDED));
    }
    Ok(value)
}

/// `expr` wrapped in a charge of `weight`.
fn charged(weight: i64, expr: IdedExpr) -> IdedExpr {
    let id = expr.id;
    IdedExpr {
        id,
        expr: Expr::Call(CallExpr {
            func_name: COST.to_owned(),
            target: None,
            args: vec![
                IdedExpr {
                    id,
                    expr: Expr::Literal(LiteralValue::Int(weight.into())),
                },
                expr,
            ],
        }),
    }
}

/// `expr` with every function call and comprehension step charged (see the [module
/// docs](self)). A step is charged, through its loop condition (a bool, cheap to hand through
/// `@cost`), what cel-go would charge for the variable reads, field selections and calls of its
/// condition and body (a comprehension nested in the body charges its own steps); a call the
/// size of the string or list it makes. Reads are not wrapped themselves: handing a large map
/// through a function would copy it.
pub fn metered(expr: &IdedExpr) -> IdedExpr {
    let mut expr = expr.clone();
    meter(&mut expr);
    expr
}

/// What one evaluation of `expr` costs by cel-go's account, its comprehensions' steps left out.
fn steps(expr: &IdedExpr) -> i64 {
    match &expr.expr {
        Expr::Call(call) => {
            1 + call.target.as_deref().map_or(0, steps) + call.args.iter().map(steps).sum::<i64>()
        }
        Expr::Select(select) => i64::from(!select.test) + steps(&select.operand),
        Expr::Ident(_) => 1,
        Expr::List(list) => 10 + list.elements.iter().map(steps).sum::<i64>(),
        Expr::Map(map) => {
            30 + map
                .entries
                .iter()
                .map(|entry| match &entry.expr {
                    EntryExpr::MapEntry(entry) => steps(&entry.key) + steps(&entry.value),
                    EntryExpr::StructField(field) => steps(&field.value),
                })
                .sum::<i64>()
        }
        Expr::Struct(construction) => {
            40 + construction
                .entries
                .iter()
                .map(|entry| match &entry.expr {
                    EntryExpr::StructField(field) => steps(&field.value),
                    EntryExpr::MapEntry(entry) => steps(&entry.key) + steps(&entry.value),
                })
                .sum::<i64>()
        }
        // Its range and start once; its steps are charged as they run.
        Expr::Comprehension(c) => steps(&c.iter_range) + steps(&c.accu_init) + steps(&c.result),
        Expr::Literal(_) | Expr::Unspecified => 0,
    }
}

fn meter(expr: &mut IdedExpr) {
    match &mut expr.expr {
        Expr::Call(call) => {
            if let Some(target) = &mut call.target {
                meter(target);
            }
            call.args.iter_mut().for_each(meter);
            let inner = std::mem::take(expr);
            *expr = charged(0, inner);
        }
        Expr::Select(select) => meter(&mut select.operand),
        Expr::List(list) => list.elements.iter_mut().for_each(meter),
        Expr::Map(map) => {
            for entry in &mut map.entries {
                match &mut entry.expr {
                    EntryExpr::MapEntry(entry) => {
                        meter(&mut entry.key);
                        meter(&mut entry.value);
                    }
                    EntryExpr::StructField(field) => meter(&mut field.value),
                }
            }
        }
        Expr::Struct(construction) => {
            for entry in &mut construction.entries {
                if let EntryExpr::StructField(field) = &mut entry.expr {
                    meter(&mut field.value);
                }
            }
        }
        Expr::Comprehension(c) => {
            // Weighed before the calls within are wrapped.
            let weight = 1 + steps(&c.loop_cond) + steps(&c.loop_step);
            meter(&mut c.iter_range);
            meter(&mut c.accu_init);
            meter(&mut c.loop_cond);
            meter(&mut c.loop_step);
            meter(&mut c.result);
            let condition = std::mem::take(&mut c.loop_cond);
            c.loop_cond = charged(weight, condition);
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}
