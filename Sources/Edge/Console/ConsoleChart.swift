import Foundation
import HeraldModel
import HeraldProto

/// The last hour of a hub as an SVG bar chart drawn on the server: deliveries per second in each
/// minute, failures stacked on top. No script, no library: the page's CSP allows neither inline
/// script nor another origin, and 60 rectangles do not need one.
struct ConsoleChart {
    static let width = 720.0
    static let height = 200.0
    static let left = 48.0
    static let bottom = 24.0

    /// Minutes with sends, oldest first.
    var minutes: [SendStatsMinute]
    var now: Int64

    var delivered: Int64 { minutes.reduce(0) { $0 + $1.delivered } }
    var failed: Int64 { minutes.reduce(0) { $0 + $1.failures.reduce(0) { $0 + $1.count } } }
    var sends: Int64 { minutes.reduce(0) { $0 + $1.sends } }

    /// Failures by reason over the hour, most first.
    var reasonTotals: [ConsoleView.Sends.Reason] {
        var totals: [String: Int64] = [:]
        for minute in minutes { for failure in minute.failures { totals[failure.reason, default: 0] += failure.count } }
        return totals.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.map {
            ConsoleView.Sends.Reason(reason: $0.key, count: $0.value)
        }
    }

    func svg() -> String {
        let firstMinute = now / 60000 - 59
        var perMinute: [Int64: (delivered: Int64, failed: Int64)] = [:]
        for minute in minutes {
            perMinute[minute.startUnixMs / 60000] = (minute.delivered, minute.failures.reduce(0) { $0 + $1.count })
        }
        let top = max(1.0, perMinute.values.map { Double($0.delivered + $0.failed) / 60 }.max() ?? 1)
        let plotWidth = Self.width - Self.left - 8
        let plotHeight = Self.height - Self.bottom - 12
        let bar = plotWidth / 60
        var out = """
            <svg class="chart" viewBox="0 0 \(Int(Self.width)) \(Int(Self.height))" role="img" aria-labelledby="chart-title chart-desc" \
            xmlns="http://www.w3.org/2000/svg"><title id="chart-title">Deliveries per second, last hour</title>\
            <desc id="chart-desc">\(delivered) delivered and \(failed) failed in \(sends) sends over the last 60 minutes; \
            each bar is one minute, failures stacked on deliveries.</desc>
            """
        // Axes and the top value.
        let baseline = 12 + plotHeight
        out += "<line class=\"axis\" x1=\"\(Self.left)\" y1=\"12\" x2=\"\(Self.left)\" y2=\"\(baseline)\"/>"
        out +=
            "<line class=\"axis\" x1=\"\(Self.left)\" y1=\"\(baseline)\" x2=\"\(Self.width - 8)\" y2=\"\(baseline)\"/>"
        out += "<text class=\"label\" x=\"\(Self.left - 4)\" y=\"18\" text-anchor=\"end\">\(Self.number(top))/s</text>"
        out += "<text class=\"label\" x=\"\(Self.left - 4)\" y=\"\(baseline)\" text-anchor=\"end\">0</text>"
        out += "<text class=\"label\" x=\"\(Self.left)\" y=\"\(Self.height - 6)\">−60 min</text>"
        out += "<text class=\"label\" x=\"\(Self.width - 8)\" y=\"\(Self.height - 6)\" text-anchor=\"end\">now</text>"
        for index in 0..<60 {
            guard let counts = perMinute[firstMinute + Int64(index)] else { continue }
            let x = Self.left + Double(index) * bar + 1
            let deliveredHeight = Double(counts.delivered) / 60 / top * plotHeight
            let failedHeight = Double(counts.failed) / 60 / top * plotHeight
            let label = xmlEscaped(
                "\(ConsolePage.time((firstMinute + Int64(index)) * 60000)): \(counts.delivered) delivered, \(counts.failed) failed"
            )
            out += "<g><title>\(label)</title>"
            if counts.delivered > 0 {
                out +=
                    "<rect class=\"delivered\" x=\(Self.attribute(x)) y=\(Self.attribute(baseline - deliveredHeight)) "
                out += "width=\(Self.attribute(bar - 2)) height=\(Self.attribute(max(1, deliveredHeight)))/>"
            }
            if counts.failed > 0 {
                out +=
                    "<rect class=\"failed\" x=\(Self.attribute(x)) y=\(Self.attribute(baseline - deliveredHeight - failedHeight)) "
                out += "width=\(Self.attribute(bar - 2)) height=\(Self.attribute(max(1, failedHeight)))/>"
            }
            out += "</g>"
        }
        return out + "</svg>"
    }

    private static func attribute(_ value: Double) -> String { "\"\(String(format: "%.1f", value))\"" }

    private static func number(_ value: Double) -> String {
        value >= 100 ? String(Int(value.rounded())) : String(format: "%.1f", value)
    }
}
