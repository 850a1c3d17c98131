//! The `ferrocm kernels` report of the AMD code objects: one row per kernel
//! and arch ([`ferrocm_host::codeobject::report`]) as an aligned table or
//! one JSON array.

use ferrocm_host::codeobject::KernelResources;
use serde_json::json;

/// The rows as one JSON array of objects whose fields come in this order:
/// `arch`, `kernel`, `vgpr`, `agpr`, `sgpr`, `lds_bytes`, `scratch_bytes`,
/// `vgpr_spills`, `sgpr_spills`, `wave_size`, `occupancy`,
/// `max_workgroup_size`, `kernarg_size`; one object per line.
///
/// ```
/// use ferrocm_host::codeobject::report;
/// use ferrocm_cli::kernels_report::to_json;
/// let text = to_json(&report(ferrocm_kernels::CODE_OBJECTS).unwrap());
/// let v: serde_json::Value = serde_json::from_str(&text).unwrap();
/// assert!(v[0]["occupancy"].as_u64().is_some());
/// ```
pub fn to_json(rows: &[KernelResources]) -> String {
    let objects: Vec<String> = rows
        .iter()
        .map(|r| {
            // Written field by field: a serde_json map would reorder the keys.
            let fields = [
                ("arch", json!(r.arch)),
                ("kernel", json!(r.kernel)),
                ("vgpr", json!(r.vgpr)),
                ("agpr", json!(r.agpr)),
                ("sgpr", json!(r.sgpr)),
                ("lds_bytes", json!(r.lds_bytes)),
                ("scratch_bytes", json!(r.scratch_bytes)),
                ("vgpr_spills", json!(r.vgpr_spills)),
                ("sgpr_spills", json!(r.sgpr_spills)),
                ("wave_size", json!(r.wave_size)),
                ("occupancy", json!(r.occupancy)),
                ("max_workgroup_size", json!(r.max_workgroup_size)),
                ("kernarg_size", json!(r.kernarg_size)),
            ];
            let body: Vec<String> = fields
                .iter()
                .map(|(k, v)| format!("{}:{v}", json!(k)))
                .collect();
            format!("  {{{}}}", body.join(","))
        })
        .collect();
    if objects.is_empty() {
        "[]".into()
    } else {
        format!("[\n{}\n]", objects.join(",\n"))
    }
}

/// The rows as an aligned text table, one line per kernel under a header.
///
/// ```
/// use ferrocm_host::codeobject::report;
/// use ferrocm_cli::kernels_report::format_table;
/// let table = format_table(&report(ferrocm_kernels::CODE_OBJECTS).unwrap());
/// assert!(table.lines().next().unwrap().starts_with("arch"));
/// ```
pub fn format_table(rows: &[KernelResources]) -> String {
    const HEADER: [&str; 13] = [
        "arch",
        "kernel",
        "vgpr",
        "agpr",
        "sgpr",
        "lds_bytes",
        "scratch_bytes",
        "vgpr_spills",
        "sgpr_spills",
        "wave_size",
        "occupancy",
        "max_wg",
        "kernarg",
    ];
    let cells: Vec<[String; 13]> = rows
        .iter()
        .map(|r| {
            let n = [
                r.vgpr,
                r.agpr,
                r.sgpr,
                r.lds_bytes,
                r.scratch_bytes,
                r.vgpr_spills,
                r.sgpr_spills,
                r.wave_size,
                r.occupancy,
                r.max_workgroup_size,
                r.kernarg_size,
            ];
            std::array::from_fn(|i| match i {
                0 => r.arch.clone(),
                1 => r.kernel.clone(),
                _ => n[i - 2].to_string(),
            })
        })
        .collect();
    let width: [usize; 13] = std::array::from_fn(|i| {
        cells
            .iter()
            .map(|c| c[i].len())
            .fold(HEADER[i].len(), usize::max)
    });
    let line = |c: [&str; 13]| {
        let text: Vec<String> = (0..13)
            .map(|i| match i {
                0 | 1 => format!("{:<w$}", c[i], w = width[i]),
                _ => format!("{:>w$}", c[i], w = width[i]),
            })
            .collect();
        text.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(HEADER);
    for c in &cells {
        out += &line(std::array::from_fn(|i| c[i].as_str()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrocm_host::codeobject::report;

    #[test]
    fn json_is_one_array_with_the_fields_in_order() {
        const FIELDS: [&str; 11] = [
            "arch",
            "kernel",
            "vgpr",
            "agpr",
            "sgpr",
            "lds_bytes",
            "scratch_bytes",
            "vgpr_spills",
            "sgpr_spills",
            "wave_size",
            "occupancy",
        ];
        let rows = report(ferrocm_kernels::CODE_OBJECTS).unwrap();
        let text = to_json(&rows);
        let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
        let array = value.as_array().expect("one array");
        assert_eq!(array.len(), rows.len());
        for (obj, row) in array.iter().zip(&rows) {
            assert_eq!(obj["arch"], row.arch.as_str());
            assert_eq!(obj["kernel"], row.kernel.as_str());
            for f in &FIELDS[2..] {
                assert!(obj[f].is_u64(), "{f} missing in {obj}");
            }
            assert_eq!(obj["occupancy"], row.occupancy);
        }
        let first = text.lines().nth(1).expect("an object line");
        let positions: Vec<usize> = FIELDS
            .iter()
            .map(|f| first.find(&format!("\"{f}\":")).expect("field present"))
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "field order: {first}"
        );
        assert_eq!(to_json(&[]), "[]");
        let table = format_table(&rows);
        assert_eq!(table.lines().count(), rows.len() + 1);
        assert!(table.lines().next().unwrap().starts_with("arch"));
    }
}
