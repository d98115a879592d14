//! Positional expression building (reference §1.5).
//!
//! Every attribute name goes through `ExpressionAttributeNames` as `#a{i}` and every value
//! through `ExpressionAttributeValues` as `:v{i}`, with `i` a running index: limit names may
//! contain `.` and `-`, which are illegal in alias tokens, and several attributes are reserved
//! words. Each name is declared once and every declared name and value is used, as DynamoDB
//! requires.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// Collects aliases, values and clauses of one `UpdateItem` (or a condition alone).
#[derive(Debug, Default, Clone)]
pub(crate) struct Expr {
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
    set: Vec<String>,
    add: Vec<String>,
    remove: Vec<String>,
    conditions: Vec<String>,
}

/// A number attribute value.
pub(crate) fn num(n: i64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

impl Expr {
    /// The alias of attribute `attr` (declared on first use).
    pub(crate) fn name(&mut self, attr: &str) -> String {
        let next = self.names.len();
        self.names
            .entry(attr.to_owned())
            .or_insert_with(|| format!("#a{next}"))
            .clone()
    }

    /// A placeholder for `value`.
    pub(crate) fn value(&mut self, value: AttributeValue) -> String {
        let token = format!(":v{}", self.values.len());
        self.values.insert(token.clone(), value);
        token
    }

    /// A placeholder for a number.
    pub(crate) fn num(&mut self, n: i64) -> String {
        self.value(num(n))
    }

    /// `SET attr = value`.
    pub(crate) fn set(&mut self, attr: &str, value: AttributeValue) {
        let (a, v) = (self.name(attr), self.value(value));
        self.set.push(format!("{a} = {v}"));
    }

    /// `ADD attr n`.
    pub(crate) fn add(&mut self, attr: &str, n: i64) {
        let (a, v) = (self.name(attr), self.num(n));
        self.add.push(format!("{a} {v}"));
    }

    /// `REMOVE attr`.
    pub(crate) fn remove(&mut self, attr: &str) {
        let a = self.name(attr);
        self.remove.push(a);
    }

    /// Adds a condition clause; it is ANDed with the others. Build it with [`Expr::name`] and
    /// [`Expr::value`].
    pub(crate) fn when(&mut self, clause: String) {
        self.conditions.push(clause);
    }

    /// `attribute_exists(attr)`.
    pub(crate) fn exists(&mut self, attr: &str) -> String {
        format!("attribute_exists({})", self.name(attr))
    }

    /// `attribute_not_exists(attr)`.
    pub(crate) fn not_exists(&mut self, attr: &str) -> String {
        format!("attribute_not_exists({})", self.name(attr))
    }

    /// `attr <op> n` for a number.
    pub(crate) fn cmp(&mut self, attr: &str, op: &str, n: i64) -> String {
        let (a, v) = (self.name(attr), self.num(n));
        format!("{a} {op} {v}")
    }

    /// The update expression, or `None` when nothing is updated.
    pub(crate) fn update_expression(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.set.is_empty() {
            parts.push(format!("SET {}", self.set.join(", ")));
        }
        if !self.add.is_empty() {
            parts.push(format!("ADD {}", self.add.join(", ")));
        }
        if !self.remove.is_empty() {
            parts.push(format!("REMOVE {}", self.remove.join(", ")));
        }
        (!parts.is_empty()).then(|| parts.join(" "))
    }

    /// The condition expression, or `None` without conditions.
    pub(crate) fn condition_expression(&self) -> Option<String> {
        (!self.conditions.is_empty()).then(|| {
            self.conditions
                .iter()
                .map(|c| format!("({c})"))
                .collect::<Vec<_>>()
                .join(" AND ")
        })
    }

    /// Alias → attribute map (`None` when empty, as the SDK wants).
    pub(crate) fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| {
            self.names
                .iter()
                .map(|(attr, alias)| (alias.clone(), attr.clone()))
                .collect()
        })
    }

    /// Placeholder → value map (`None` when empty).
    pub(crate) fn values(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }
}

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
    fn empty_expression_has_no_parts() {
        let e = Expr::default();
        assert!(e.update_expression().is_none());
        assert!(e.condition_expression().is_none());
        assert!(e.names().is_none());
        assert!(e.values().is_none());
    }
}
