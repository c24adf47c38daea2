import Foundation

/// One figure of a scenario next to the baseline measured in the same run.
///
/// `ratio` is `value / baselineValue`; `better` says which way is good ("lower" for latencies and
/// memory, "higher" for rates), so a reader (or a script) can compare runs without knowing each figure.
struct Record: Codable, Sendable {
    var scenario: String
    var figure: String
    var unit: String
    var value: Double
    var baseline: String
    var baselineValue: Double
    var ratio: Double
    var better: String
    var target: String?

    init(
        _ scenario: String, _ figure: String, unit: String, value: Double, baseline: String, baselineValue: Double,
        better: String, target: String? = nil
    ) {
        self.scenario = scenario
        self.figure = figure
        self.unit = unit
        self.value = value
        self.baseline = baseline
        self.baselineValue = baselineValue
        self.ratio = baselineValue == 0 ? 0 : value / baselineValue
        self.better = better
        self.target = target
    }
}

/// What every scenario command shares.
struct Report {
    var records: [Record] = []
    var tables: [String] = []

    mutating func add(_ other: Report) {
        records += other.records
        tables += other.tables
    }

    /// The records as one table: figure, value, baseline, ratio, and the target where the issue set one.
    func summary() -> String {
        var lines = [
            "| scenario | figure | value | baseline (same run) | ratio | target |",
            "|---|---|---:|---|---:|---|",
        ]
        for r in records {
            lines.append(
                "| \(r.scenario) | \(r.figure) | \(format(r.value)) \(r.unit) | \(r.baseline): \(format(r.baselineValue)) \(r.unit) | \(String(format: "%.2f", r.ratio))× | \(r.target ?? "") |"
            )
        }
        return lines.joined(separator: "\n")
    }

    func write(json path: String) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        try encoder.encode(records).write(to: URL(fileURLWithPath: path))
    }

    /// Every figure is a finite positive number (what `--quick` checks: numbers, never thresholds).
    func check(scenarios: [String]) throws {
        for scenario in scenarios where !records.contains(where: { $0.scenario == scenario }) {
            throw BenchError("scenario \(scenario) produced no figures")
        }
        for r in records where !(r.value.isFinite && r.value > 0 && r.baselineValue.isFinite && r.baselineValue > 0) {
            throw BenchError("\(r.scenario) \(r.figure): not a number (\(r.value) vs \(r.baselineValue))")
        }
    }
}

func format(_ x: Double) -> String {
    if x >= 100 { return String(format: "%.0f", x) }
    if x >= 10 { return String(format: "%.1f", x) }
    return String(format: "%.2f", x)
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
