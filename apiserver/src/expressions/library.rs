//! The functions a Kubernetes CEL rule may call beyond the `cel` crate's standard ones, as
//! kube's `apiserver/pkg/cel/library` and cel-go's `ext.Strings` define them: strings
//! (`lowerAscii`, `upperAscii`, `trim`, `replace`, `split`, `substring`, `charAt`, `indexOf`,
//! `lastIndexOf`, `join`), lists (`isSorted`, `sum`, `min`, `max`, `indexOf`, `lastIndexOf`),
//! regular expressions (`find`, `findAll`), and `size` counting a string's characters, not
//! its bytes. Missing (a rule calling one is refused at CRD creation as an undeclared
//! reference): URLs, quantities, IPs and CIDRs, `format`, semver, sets, `type()`/`dyn()`.

use std::sync::Arc;

use cel::extractors::{Arguments, This};
use cel::{Context, ExecutionError, FunctionContext, ResolveResult, Value};

/// Every function a rule may call: the standard ones and these.
pub const FUNCTIONS: &[&str] = &[
    // The `cel` crate's.
    "contains",
    "size",
    "max",
    "min",
    "startsWith",
    "endsWith",
    "string",
    "bytes",
    "double",
    "int",
    "uint",
    "optional.none",
    "optional.of",
    "optional.ofNonZeroValue",
    "value",
    "hasValue",
    "or",
    "orValue",
    "matches",
    "duration",
    "timestamp",
    "getFullYear",
    "getMonth",
    "getDayOfYear",
    "getDayOfMonth",
    "getDate",
    "getDayOfWeek",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
    // Macros and operators the parser expands.
    "has",
    "all",
    "exists",
    "exists_one",
    "existsOne",
    "map",
    "filter",
    // Kubernetes'.
    "lowerAscii",
    "upperAscii",
    "trim",
    "replace",
    "split",
    "substring",
    "charAt",
    "indexOf",
    "lastIndexOf",
    "join",
    "isSorted",
    "sum",
    "find",
    "findAll",
];

/// The root context rules are evaluated in: the standard functions and Kubernetes'.
pub fn context() -> Context<'static> {
    let mut context = Context::default();
    context.add_function(super::cost::COST, super::cost::charge);
    context.add_function("size", size);
    context.add_function("min", min);
    context.add_function("max", max);
    context.add_function("matches", matches);
    context.add_function("lowerAscii", |This(s): This<Arc<String>>| {
        s.to_ascii_lowercase()
    });
    context.add_function("upperAscii", |This(s): This<Arc<String>>| {
        s.to_ascii_uppercase()
    });
    context.add_function("trim", |This(s): This<Arc<String>>| s.trim().to_owned());
    context.add_function("replace", replace);
    context.add_function("split", split);
    context.add_function("substring", substring);
    context.add_function("charAt", char_at);
    context.add_function("indexOf", index_of);
    context.add_function("lastIndexOf", last_index_of);
    context.add_function("join", join);
    context.add_function("isSorted", is_sorted);
    context.add_function("sum", sum);
    context.add_function("find", find);
    context.add_function("findAll", find_all);
    context
}

fn int(ftx: &FunctionContext, value: &Value) -> Result<i64, ExecutionError> {
    match value {
        Value::Int(i) => Ok(*i),
        Value::UInt(u) => i64::try_from(*u).map_err(|_| ftx.error("integer overflow")),
        _ => Err(ftx.error("no such overload")),
    }
}

fn text(ftx: &FunctionContext, value: &Value) -> Result<Arc<String>, ExecutionError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        _ => Err(ftx.error("no such overload")),
    }
}

/// The string argument at `at`.
fn string_arg(
    ftx: &FunctionContext,
    args: &[Value],
    at: usize,
) -> Result<Arc<String>, ExecutionError> {
    text(
        ftx,
        args.get(at).ok_or_else(|| ftx.error("no such overload"))?,
    )
}

/// An optional count argument at `at` (cel-go's `n` of `replace`, `split`, `findAll`): -1, all,
/// when absent.
fn limit_arg(ftx: &FunctionContext, args: &[Value], at: usize) -> Result<i64, ExecutionError> {
    args.get(at).map_or(Ok(-1), |n| int(ftx, n))
}

/// `size`: a string's length in characters (code points), as CEL counts it.
fn size(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    Ok(Value::Int(match this {
        Value::String(s) => s.chars().count() as i64,
        Value::List(l) => l.len() as i64,
        Value::Map(m) => m.map.len() as i64,
        Value::Bytes(b) => b.len() as i64,
        _ => return Err(ftx.error("no such overload")),
    }))
}

/// `min`/`max` of a list's items (kube's lists library; an error on an empty list), or of
/// the arguments (the standard function).
fn extreme(ftx: &FunctionContext, args: &[Value], want: std::cmp::Ordering) -> ResolveResult {
    let items: Vec<Value> = match (&ftx.this, args) {
        (Some(Value::List(list)), []) => list.as_ref().clone(),
        (None, [Value::List(list)]) => list.as_ref().clone(),
        (None, many) => many.to_vec(),
        _ => return Err(ftx.error("no such overload")),
    };
    let mut best: Option<Value> = None;
    for item in items {
        best = match best {
            None => Some(item),
            Some(current) => match item.partial_cmp(&current) {
                Some(order) if order == want => Some(item),
                Some(_) => Some(current),
                None => return Err(ftx.error("no such overload")),
            },
        };
    }
    best.ok_or_else(|| ftx.error("min called on empty list"))
}

fn min(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    extreme(ftx, &args, std::cmp::Ordering::Less)
}

fn max(ftx: &FunctionContext, Arguments(args): Arguments) -> ResolveResult {
    extreme(ftx, &args, std::cmp::Ordering::Greater)
}

/// RE2's classes are ASCII (`\d` is `[0-9]`); Rust's regex's are Unicode unless told.
fn regex(ftx: &FunctionContext, pattern: &str) -> Result<regex::Regex, ExecutionError> {
    regex::RegexBuilder::new(pattern)
        .unicode(false)
        .build()
        .or_else(|_| regex::Regex::new(pattern))
        .map_err(|err| ftx.error(format!("invalid regex {pattern:?}: {err}")))
}

fn matches(
    ftx: &FunctionContext,
    This(this): This<Arc<String>>,
    pattern: Arc<String>,
) -> ResolveResult {
    Ok(Value::Bool(regex(ftx, &pattern)?.is_match(&this)))
}

fn find(
    ftx: &FunctionContext,
    This(this): This<Arc<String>>,
    pattern: Arc<String>,
) -> ResolveResult {
    let found = regex(ftx, &pattern)?
        .find(&this)
        .map(|m| m.as_str().to_owned())
        .unwrap_or_default();
    Ok(Value::String(Arc::new(found)))
}

fn find_all(
    ftx: &FunctionContext,
    This(this): This<Arc<String>>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let pattern = string_arg(ftx, &args, 0)?;
    let limit = limit_arg(ftx, &args, 1)?;
    let found: Vec<Value> = regex(ftx, &pattern)?
        .find_iter(&this)
        .take(if limit < 0 {
            usize::MAX
        } else {
            limit as usize
        })
        .map(|m| Value::String(Arc::new(m.as_str().to_owned())))
        .collect();
    Ok(Value::List(Arc::new(found)))
}

fn replace(
    ftx: &FunctionContext,
    This(this): This<Arc<String>>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let (old, new) = match args.as_slice() {
        [old, new, ..] => (text(ftx, old)?, text(ftx, new)?),
        _ => return Err(ftx.error("no such overload")),
    };
    let limit = limit_arg(ftx, &args, 2)?;
    Ok(Value::String(Arc::new(if limit < 0 {
        this.replace(old.as_str(), &new)
    } else {
        this.replacen(old.as_str(), &new, limit as usize)
    })))
}

fn split(
    ftx: &FunctionContext,
    This(this): This<Arc<String>>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let separator = string_arg(ftx, &args, 0)?;
    let limit = limit_arg(ftx, &args, 1)?;
    let string = |p: &str| Value::String(Arc::new(p.to_owned()));
    // Go's `strings.SplitN`: an empty separator splits between characters.
    let pieces: Vec<String> = if separator.is_empty() {
        let chars: Vec<String> = this.chars().map(String::from).collect();
        match limit {
            n if n > 0 && (n as usize) < chars.len() => {
                let mut head: Vec<String> = chars[..n as usize - 1].to_vec();
                head.push(chars[n as usize - 1..].concat());
                head
            }
            _ => chars,
        }
    } else if limit < 0 {
        this.split(separator.as_str()).map(str::to_owned).collect()
    } else {
        this.splitn(limit as usize, separator.as_str())
            .map(str::to_owned)
            .collect()
    };
    let parts: Vec<Value> = if limit == 0 {
        Vec::new()
    } else {
        pieces.iter().map(|p| string(p)).collect()
    };
    Ok(Value::List(Arc::new(parts)))
}

fn substring(
    ftx: &FunctionContext,
    This(this): This<Arc<String>>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let chars: Vec<char> = this.chars().collect();
    let start = int(
        ftx,
        args.first().ok_or_else(|| ftx.error("no such overload"))?,
    )?;
    let end = match args.get(1) {
        Some(e) => int(ftx, e)?,
        None => chars.len() as i64,
    };
    if start < 0 || end < start || end > chars.len() as i64 {
        return Err(ftx.error(format!(
            "index out of range: {}",
            if start < 0 || start > chars.len() as i64 {
                start
            } else {
                end
            }
        )));
    }
    Ok(Value::String(Arc::new(
        chars[start as usize..end as usize].iter().collect(),
    )))
}

fn char_at(ftx: &FunctionContext, This(this): This<Arc<String>>, index: Value) -> ResolveResult {
    let index = int(ftx, &index)?;
    let chars: Vec<char> = this.chars().collect();
    match usize::try_from(index).ok() {
        Some(i) if i < chars.len() => Ok(Value::String(Arc::new(chars[i].to_string()))),
        Some(i) if i == chars.len() => Ok(Value::String(Arc::new(String::new()))),
        _ => Err(ftx.error(format!("index out of range: {index}"))),
    }
}

/// `indexOf` of a substring (in characters) or of a list item; -1 when absent.
fn index_of(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> ResolveResult {
    position(ftx, this, &args, false)
}

fn last_index_of(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> ResolveResult {
    position(ftx, this, &args, true)
}

fn position(ftx: &FunctionContext, this: Value, args: &[Value], last: bool) -> ResolveResult {
    let wanted = args.first().ok_or_else(|| ftx.error("no such overload"))?;
    let found = match (&this, wanted) {
        (Value::List(list), item) => {
            let mut positions = list.iter().enumerate().filter(|(_, v)| *v == item);
            let hit = if last {
                positions.next_back()
            } else {
                positions.next()
            };
            hit.map(|(i, _)| i as i64)
        }
        (Value::String(s), Value::String(sub)) => {
            let chars: Vec<char> = s.chars().collect();
            let needle: Vec<char> = sub.chars().collect();
            // cel-go's optional offset, in characters: where the search starts (`indexOf`) or
            // the last position a match may start at (`lastIndexOf`).
            let offset = match args.get(1) {
                Some(offset) => {
                    let offset = int(ftx, offset)?;
                    if offset < 0 || offset as usize > chars.len() {
                        return Err(ftx.error(format!("index out of range: {offset}")));
                    }
                    Some(offset as usize)
                }
                None => None,
            };
            let fits = |i: &usize| {
                *i + needle.len() <= chars.len() && chars[*i..*i + needle.len()] == needle[..]
            };
            if last {
                let end = offset.unwrap_or(chars.len());
                (0..=end.min(chars.len())).rev().find(fits)
            } else {
                (offset.unwrap_or(0)..=chars.len()).find(fits)
            }
            .map(|i| i as i64)
        }
        _ => return Err(ftx.error("no such overload")),
    };
    Ok(Value::Int(found.unwrap_or(-1)))
}

fn join(
    ftx: &FunctionContext,
    This(this): This<Value>,
    Arguments(args): Arguments,
) -> ResolveResult {
    let Value::List(list) = this else {
        return Err(ftx.error("no such overload"));
    };
    let separator = match args.first() {
        Some(s) => text(ftx, s)?.as_str().to_owned(),
        None => String::new(),
    };
    let parts: Result<Vec<String>, ExecutionError> = list
        .iter()
        .map(|v| text(ftx, v).map(|s| s.as_str().to_owned()))
        .collect();
    Ok(Value::String(Arc::new(parts?.join(&separator))))
}

fn is_sorted(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    let Value::List(list) = this else {
        return Err(ftx.error("no such overload"));
    };
    for pair in list.windows(2) {
        match pair[0].partial_cmp(&pair[1]) {
            Some(std::cmp::Ordering::Greater) => return Ok(Value::Bool(false)),
            Some(_) => {}
            None => return Err(ftx.error("no such overload")),
        }
    }
    Ok(Value::Bool(true))
}

fn sum(ftx: &FunctionContext, This(this): This<Value>) -> ResolveResult {
    let Value::List(list) = this else {
        return Err(ftx.error("no such overload"));
    };
    let mut total = Value::Int(0);
    for (i, item) in list.iter().enumerate() {
        total = match (i, &total, item) {
            (0, _, item) => item.clone(),
            (_, Value::Int(a), Value::Int(b)) => Value::Int(
                a.checked_add(*b)
                    .ok_or_else(|| ftx.error("integer overflow"))?,
            ),
            (_, Value::UInt(a), Value::UInt(b)) => Value::UInt(
                a.checked_add(*b)
                    .ok_or_else(|| ftx.error("integer overflow"))?,
            ),
            (_, Value::Float(a), Value::Float(b)) => Value::Float(a + b),
            (_, Value::Duration(a), Value::Duration(b)) => Value::Duration(*a + *b),
            _ => return Err(ftx.error("no such overload")),
        };
    }
    Ok(total)
}
