import Foundation
import HeraldProto
import HeraldTestSupport
import Testing

@testable import Edge

#if canImport(FoundationXML)
    import FoundationXML
#endif

/// The console's last-hour chart, drawn on the server as SVG: one bar per minute of the last 60,
/// failures stacked on deliveries, scaled to the busiest minute, and always well-formed.
@Suite("console chart", .watchedForStalls)
struct ConsoleChartTests {
    static let now: Int64 = 1_764_000_000_000 / 60000 * 60000 + 30_000

    static func minute(_ ago: Int64, delivered: Int64, failed: [(String, Int64)] = [], sends: Int64 = 1)
        -> SendStatsMinute
    {
        SendStatsMinute(
            startUnixMs: (now / 60000 - ago) * 60000, delivered: delivered,
            failures: failed.map { FailureCount(reason: $0.0, count: $0.1) }, sends: sends)
    }

    /// The chart's rectangles as (class, x, y, height).
    static func bars(_ svg: String) -> [(kind: String, x: Double, y: Double, height: Double)] {
        svg.matches(of: /<rect class="(\w+)" x="([\d.]+)" y="([\d.-]+)" width="[\d.]+" height="([\d.]+)"\/>/).map {
            (String($0.1), Double($0.2) ?? -1, Double($0.3) ?? -1, Double($0.4) ?? -1)
        }
    }

    @Test(
        "a bar per minute with pushes, in time order; failures stacked on deliveries; minutes older than an hour left out"
    )
    func bars() {
        let chart = ConsoleChart(
            minutes: [
                Self.minute(90, delivered: 600), Self.minute(59, delivered: 60),
                Self.minute(10, delivered: 120, failed: [("BadDeviceToken", 60)]), Self.minute(0, delivered: 6000),
            ], now: Self.now)
        let svg = chart.svg()
        let bars = Self.bars(svg)
        #expect(bars.map(\.kind) == ["delivered", "delivered", "failed", "delivered"], "\(svg)")
        #expect(bars.map(\.x) == bars.map(\.x).sorted())
        // The busiest minute (6,000 in a minute: 100/s) is the full height; the others in proportion.
        let full = bars[3].height
        #expect(abs(bars[0].height - full / 100) < 0.2 && abs(bars[1].height - full * 2 / 100) < 0.2)
        // The failures sit on top of that minute's deliveries.
        #expect(abs(bars[2].y + bars[2].height - bars[1].y) < 0.2)
        #expect(svg.contains(">100/s</text>"))
        #expect(chart.delivered == 6780 && chart.failed == 60 && chart.sends == 4)
        #expect(XMLParser(data: Data(svg.utf8)).parse(), "not well-formed: \(svg)")
    }

    @Test("an empty hour: axes and a scale of 1/s, no bar; text stays well-formed whatever a reason holds")
    func empty() {
        let svg = ConsoleChart(minutes: [], now: Self.now).svg()
        #expect(Self.bars(svg).isEmpty && svg.contains(">1.0/s</text>"))
        #expect(svg.contains("0 delivered and 0 failed in 0 sends"))
        #expect(XMLParser(data: Data(svg.utf8)).parse())
    }

    @Test("failure reasons over the hour, most first, ties by name")
    func reasons() {
        let chart = ConsoleChart(
            minutes: [
                Self.minute(3, delivered: 1, failed: [("Unregistered", 2), ("<script>", 5)]),
                Self.minute(2, delivered: 1, failed: [("BadDeviceToken", 5), ("Unregistered", 3)]),
            ], now: Self.now)
        #expect(chart.reasonTotals.map(\.reason) == ["<script>", "BadDeviceToken", "Unregistered"])
        #expect(chart.reasonTotals.map(\.count) == [5, 5, 5])
    }

    @Test("counts far beyond a real hour still draw within the chart")
    func large() {
        let chart = ConsoleChart(
            minutes: [Self.minute(1, delivered: 1 << 40, failed: [("x", 1 << 40)]), Self.minute(2, delivered: 1)],
            now: Self.now)
        for bar in Self.bars(chart.svg()) {
            #expect(bar.y >= 0 && bar.y + bar.height <= ConsoleChart.height, "\(bar)")
        }
    }
}
