//! Positional expressions (reference §1.5): how every request names attributes.
//!
//! Every attribute name goes through `ExpressionAttributeNames` as `#a{i}` and every value
//! through `ExpressionAttributeValues` as `:v{i}`, with `i` a running index: limit names may
//! contain `.` and `-`, which are illegal in alias tokens, and several attributes are reserved
//! words (`name`, `resource`, `window`, `ttl`, …). Each name is declared once and every
//! declared name and value is used, as DynamoDB requires. No expression in the workspace
//! spells an attribute name inline.
//!
//! ```
//! use dynalimit_format::attr;
//! use dynalimit_format::expr::Expr;
//! use dynalimit_format::item::s;
//!
//! let mut e = Expr::default();
//! e.set(attr::STATUS, s("deleted"));
//! let c = e.exists(attr::PK);
//! e.when(c);
//! assert_eq!(e.update_expression().as_deref(), Some("SET #a0 = :v0"));
//! assert_eq!(e.condition_expression().as_deref(), Some("(attribute_exists(#a1))"));
//! ```

use std::collections::HashMap;

use aws_sdk_dynamodb::operation::delete_item::builders::DeleteItemFluentBuilder;
use aws_sdk_dynamodb::operation::put_item::builders::PutItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::types::builders::{
    ConditionCheckBuilder, DeleteBuilder, PutBuilder, UpdateBuilder,
};

/// Collects aliases, values and clauses of one `UpdateItem` (or a condition alone).
///
/// Small vectors rather than maps: an expression has a few dozen names and values at most,
/// and it is built on every acquire, so lookups are linear scans and tokens are written
/// without the formatting machinery.
#[derive(Debug, Default, Clone)]
pub struct Expr {
    /// (attribute, alias) in declaration order.
    names: Vec<(String, String)>,
    /// (placeholder, value) in declaration order.
    values: Vec<(String, AttributeValue)>,
    set: Vec<String>,
    add: Vec<String>,
    delete: Vec<String>,
    remove: Vec<String>,
    conditions: Vec<String>,
}

/// A number attribute value.
pub fn num(n: i64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

/// `prefix` followed by the decimal digits of `i`.
fn token(prefix: &str, i: usize) -> String {
    let digits = crate::item::Digits::of(i as u64);
    let mut out = String::with_capacity(prefix.len() + digits.as_bytes().len());
    out.push_str(prefix);
    out.extend(digits.as_bytes().iter().map(|&d| char::from(d)));
    out
}

/// `alias op placeholder` in one allocation.
fn compare(alias: &str, op: &str, placeholder: &str) -> String {
    let mut out = String::with_capacity(alias.len() + op.len() + placeholder.len() + 2);
    out.push_str(alias);
    out.push(' ');
    out.push_str(op);
    out.push(' ');
    out.push_str(placeholder);
    out
}

/// `a` + `sep` + `b` in one allocation.
fn join3(a: &str, sep: &str, b: &str) -> String {
    let mut out = String::with_capacity(a.len() + sep.len() + b.len());
    out.push_str(a);
    out.push_str(sep);
    out.push_str(b);
    out
}

impl Expr {
    /// The alias of attribute `attr` (declared on first use).
    pub fn name(&mut self, attr: &str) -> String {
        if let Some((_, alias)) = self.names.iter().find(|(a, _)| a == attr) {
            return alias.clone();
        }
        let alias = token("#a", self.names.len());
        self.names.push((attr.to_owned(), alias.clone()));
        alias
    }

    /// A placeholder for `value`.
    pub fn value(&mut self, value: AttributeValue) -> String {
        let placeholder = token(":v", self.values.len());
        self.values.push((placeholder.clone(), value));
        placeholder
    }

    /// A placeholder for a number.
    pub fn num(&mut self, n: i64) -> String {
        self.value(num(n))
    }

    /// `SET attr = value`.
    pub fn set(&mut self, attr: &str, value: AttributeValue) {
        let (a, v) = (self.name(attr), self.value(value));
        self.set.push(join3(&a, " = ", &v));
    }

    /// `ADD attr n`.
    pub fn add(&mut self, attr: &str, n: i64) {
        let (a, v) = (self.name(attr), self.num(n));
        self.add.push(join3(&a, " ", &v));
    }

    /// `SET attr = if_not_exists(attr, value)`: written only when the item has none.
    pub fn set_if_absent(&mut self, attr: &str, value: AttributeValue) {
        let (a, v) = (self.name(attr), self.value(value));
        self.set.push(format!("{a} = if_not_exists({a}, {v})"));
    }

    /// `SET attr = if_not_exists(attr, 0) + by`: a counter raised by `by` (0 when absent).
    pub(crate) fn set_incremented(&mut self, attr: &str, by: i64) {
        let (a, zero, by) = (self.name(attr), self.num(0), self.num(by));
        self.set
            .push(format!("{a} = if_not_exists({a}, {zero}) + {by}"));
    }

    /// `SET attr = if_not_exists(source, value)`: `attr` takes `source`'s value, or `value`
    /// when the item has no `source`.
    pub fn set_from_if_absent(&mut self, attr: &str, source: &str, value: AttributeValue) {
        let (a, s, v) = (self.name(attr), self.name(source), self.value(value));
        self.set.push(format!("{a} = if_not_exists({s}, {v})"));
    }

    /// `ADD attr value` for a value that is not a number (a set).
    pub fn add_value(&mut self, attr: &str, value: AttributeValue) {
        let (a, v) = (self.name(attr), self.value(value));
        self.add.push(join3(&a, " ", &v));
    }

    /// `DELETE attr value` (elements of a set).
    pub fn delete(&mut self, attr: &str, value: AttributeValue) {
        let (a, v) = (self.name(attr), self.value(value));
        self.delete.push(join3(&a, " ", &v));
    }

    /// `REMOVE attr`.
    pub fn remove(&mut self, attr: &str) {
        let a = self.name(attr);
        self.remove.push(a);
    }

    /// Adds a condition clause; it is ANDed with the others. Build it with [`Expr::name`] and
    /// [`Expr::value`].
    pub fn when(&mut self, clause: String) {
        self.conditions.push(clause);
    }

    /// `attribute_exists(attr)`.
    pub fn exists(&mut self, attr: &str) -> String {
        format!("attribute_exists({})", self.name(attr))
    }

    /// `attribute_not_exists(attr)`.
    pub fn not_exists(&mut self, attr: &str) -> String {
        format!("attribute_not_exists({})", self.name(attr))
    }

    /// `attr <op> n` for a number.
    pub fn cmp(&mut self, attr: &str, op: &str, n: i64) -> String {
        let a = self.name(attr);
        let v = self.num(n);
        compare(&a, op, &v)
    }

    /// `attr = value` for any value.
    pub fn eq(&mut self, attr: &str, value: AttributeValue) -> String {
        let a = self.name(attr);
        let v = self.value(value);
        compare(&a, "=", &v)
    }

    /// `attr <> value` for any value.
    pub fn ne(&mut self, attr: &str, value: AttributeValue) -> String {
        let a = self.name(attr);
        let v = self.value(value);
        compare(&a, "<>", &v)
    }

    /// `begins_with(attr, prefix)`.
    pub fn begins_with(&mut self, attr: &str, prefix: impl Into<String>) -> String {
        let (a, v) = (
            self.name(attr),
            self.value(AttributeValue::S(prefix.into())),
        );
        format!("begins_with({a}, {v})")
    }

    /// The update expression, or `None` when nothing is updated.
    pub fn update_expression(&self) -> Option<String> {
        let mut out = String::with_capacity(256);
        for (keyword, clauses) in [
            ("SET ", &self.set),
            ("ADD ", &self.add),
            ("DELETE ", &self.delete),
            ("REMOVE ", &self.remove),
        ] {
            if clauses.is_empty() {
                continue;
            }
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(keyword);
            for (i, clause) in clauses.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(clause);
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// The condition expression, or `None` without conditions.
    pub fn condition_expression(&self) -> Option<String> {
        if self.conditions.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(512);
        for (i, c) in self.conditions.iter().enumerate() {
            if i > 0 {
                out.push_str(" AND ");
            }
            out.push('(');
            out.push_str(c);
            out.push(')');
        }
        Some(out)
    }

    /// The conditions joined by `AND` without parentheses, as a query's key condition
    /// (`None` without conditions).
    pub fn key_condition(&self) -> Option<String> {
        (!self.conditions.is_empty()).then(|| self.conditions.join(" AND "))
    }

    /// A projection of `attrs` by their aliases.
    pub fn projection(&mut self, attrs: &[&str]) -> String {
        attrs
            .iter()
            .map(|a| self.name(a))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Alias → attribute map (`None` when empty, as the SDK wants).
    pub fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| {
            self.names
                .iter()
                .map(|(attr, alias)| (alias.clone(), attr.clone()))
                .collect()
        })
    }

    /// (placeholder, attribute) pairs, borrowed.
    pub fn name_pairs(&self) -> Vec<(&str, &str)> {
        self.names
            .iter()
            .map(|(attr, alias)| (alias.as_str(), attr.as_str()))
            .collect()
    }

    /// (placeholder, value) pairs, borrowed.
    pub fn value_pairs(&self) -> &[(String, AttributeValue)] {
        &self.values
    }

    /// Placeholder → value map (`None` when empty).
    pub fn values(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.iter().cloned().collect())
    }
}

/// A request (or transaction item) builder an [`Expr`] is written into: its update expression
/// where the request has one, its condition, and every name and value they use, so that no
/// request sends a clause without its aliases.
///
/// ```
/// use aws_sdk_dynamodb::types::Update;
/// use dynalimit_format::expr::{Expr, WithExpr};
///
/// let mut e = Expr::default();
/// e.add("n", 1);
/// let c = e.exists("PK");
/// e.when(c);
/// let update = Update::builder().table_name("t").with_expr(&e);
/// assert_eq!(update.get_update_expression().as_deref(), Some("ADD #a0 :v0"));
/// assert_eq!(update.get_condition_expression().as_deref(), Some("(attribute_exists(#a1))"));
/// assert_eq!(update.get_expression_attribute_names().as_ref().map(|n| n.len()), Some(2));
/// ```
pub trait WithExpr: Sized {
    /// Writes `e` into the builder.
    #[must_use]
    fn with_expr(self, e: &Expr) -> Self;
}

macro_rules! with_update {
    ($($builder:ty),*) => {$(
        impl WithExpr for $builder {
            fn with_expr(self, e: &Expr) -> Self {
                self.set_update_expression(e.update_expression())
                    .set_condition_expression(e.condition_expression())
                    .set_expression_attribute_names(e.names())
                    .set_expression_attribute_values(e.values())
            }
        }
    )*};
}

macro_rules! with_condition {
    ($($builder:ty),*) => {$(
        impl WithExpr for $builder {
            fn with_expr(self, e: &Expr) -> Self {
                self.set_condition_expression(e.condition_expression())
                    .set_expression_attribute_names(e.names())
                    .set_expression_attribute_values(e.values())
            }
        }
    )*};
}

with_update!(UpdateItemFluentBuilder, UpdateBuilder);
with_condition!(
    PutItemFluentBuilder,
    DeleteItemFluentBuilder,
    PutBuilder,
    DeleteBuilder,
    ConditionCheckBuilder
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hard_case_13_limit_names_with_dots_and_dashes_use_positional_tokens() {
        let mut e = Expr::default();
        e.add("b_rpm.v2_tk", -1000);
        e.add("b_tpm-x_tc", 1000);
        let c = e.cmp("b_rpm.v2_tk", ">=", 1000);
        e.when(c);
        let update = e.update_expression().unwrap();
        let cond = e.condition_expression().unwrap();
        assert_eq!(update, "ADD #a0 :v0, #a1 :v1");
        assert_eq!(cond, "(#a0 >= :v2)");
        for text in [&update, &cond] {
            assert!(!text.contains('.') && !text.contains('-'));
        }
        let names = e.names().unwrap();
        assert_eq!(names["#a0"], "b_rpm.v2_tk");
        assert_eq!(names.len(), 2);
        assert_eq!(e.values().unwrap().len(), 3);
    }

    #[test]
    fn reserved_words_are_aliased_and_clauses_are_grouped() {
        let mut e = Expr::default();
        e.set("rf", num(5));
        e.remove("ttl");
        e.add("b_x_tc", 1);
        let c = e.not_exists("PK");
        e.when(c);
        let c = e.exists("cascade");
        e.when(c);
        assert_eq!(
            e.update_expression().unwrap(),
            "SET #a0 = :v0 ADD #a2 :v1 REMOVE #a1"
        );
        assert_eq!(
            e.condition_expression().unwrap(),
            "(attribute_not_exists(#a3)) AND (attribute_exists(#a4))"
        );
        assert_eq!(e.names().unwrap()["#a1"], "ttl");
    }

    #[test]
    fn tokens_are_prefix_and_decimal_index() {
        assert_eq!(token("#a", 0), "#a0");
        assert_eq!(token(":v", 9), ":v9");
        assert_eq!(token(":v", 1234), ":v1234");
        assert_eq!(token("#a", usize::MAX), format!("#a{}", usize::MAX));
    }

    #[test]
    fn empty_expression_has_no_parts() {
        let e = Expr::default();
        assert!(e.update_expression().is_none());
        assert!(e.condition_expression().is_none());
        assert!(e.names().is_none());
        assert!(e.values().is_none());
    }
}
