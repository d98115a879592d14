//! Aligned text tables on standard output.

/// Prints `rows` (the first is the header, underlined) as an aligned text table, two spaces
/// in from the margin: numbers are right-aligned, other cells (and the first column) left.
pub fn print_table<const N: usize>(rows: &[[String; N]]) {
    for line in lines(rows) {
        println!("{line}");
    }
}

/// The lines [`print_table`] prints.
fn lines<const N: usize>(rows: &[[String; N]]) -> Vec<String> {
    let mut widths = [0usize; N];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let mut out = Vec::with_capacity(rows.len() + 1);
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if c == 0 || cell.parse::<f64>().is_err() {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        out.push(format!("  {}", line.join("  ").trim_end()));
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push(format!("  {}", rule.join("  ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::lines;

    fn row(cells: [&str; 3]) -> [String; 3] {
        cells.map(str::to_string)
    }

    #[test]
    fn numbers_align_right_and_text_left_under_a_rule() {
        let rows = [
            row(["entity", "limit", "capacity"]),
            row(["acme", "rpm", "100"]),
            row(["acme-key-1", "tpm", "20000"]),
        ];
        assert_eq!(
            lines(&rows),
            [
                "  entity      limit  capacity",
                "  ----------  -----  --------",
                "  acme        rpm         100",
                "  acme-key-1  tpm       20000",
            ]
        );
    }

    #[test]
    fn the_first_column_stays_left_even_for_numbers() {
        let rows = [
            row(["n", "x", "y"]),
            row(["7", "-", "12"]),
            row(["123", "ab", "3"]),
        ];
        assert_eq!(
            lines(&rows),
            [
                "  n    x   y",
                "  ---  --  --",
                "  7    -   12",
                "  123  ab   3"
            ]
        );
    }
}
