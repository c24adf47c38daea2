import Foundation
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// services/prometheus: the alert rules and the Grafana dashboard ask only for series Herald
/// exports. (promtool checks and unit-tests the rules themselves in scripts/test.sh.)
@Suite(
    "monitoring: rules and dashboard", .serialized, .timeLimit(.minutes(3)),
    // The disk gauge belongs to SQLite files; the PostgreSQL pass has none to show.
    .enabled(if: LiveStack.defaultDatabase == .sqlite, "the SQLite stack exports every series"), .watchedForStalls)
struct MonitoringTests {
    static let folder = packageRoot.appendingPathComponent("services/prometheus").path

    /// The metric names an expression file refers to: Herald's own (`herald_…`) and recording
    /// rules' (`level:herald_…:operation`).
    static func names(in text: String) -> (metrics: Set<String>, recorded: Set<String>) {
        var metrics = Set<String>()
        var recorded = Set<String>()
        for match in text.matches(of: /[a-z_]*:?herald_[a-z0-9_]+(:[a-z0-9_]+)?/) {
            let name = String(match.output.0)
            if name.contains(":") { recorded.insert(name) } else { metrics.insert(name) }
        }
        return (metrics, recorded)
    }

    /// The sample names of a Prometheus text exposition.
    static func sampleNames(_ exposition: String) -> Set<String> {
        Set(
            exposition.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap { line in
                line.split(whereSeparator: { $0 == "{" || $0 == " " }).first.map(String.init)
            })
    }

    @Test(
        "every series the alert rules and the dashboard use is in the /metrics of a live TLS stack after the tutorial sequence"
    )
    func namesExist() async throws {
        let rules = try String(contentsOfFile: "\(Self.folder)/herald.rules.yml", encoding: .utf8)
        let dashboardData = try Data(contentsOf: URL(fileURLWithPath: "\(Self.folder)/herald-dashboard.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: dashboardData) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        let expressions = panels.flatMap {
            ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String }
        }
        #expect(expressions.count >= 16)

        let defined = Set(rules.matches(of: /record: ([a-z_:0-9]+)/).map { String($0.output.1) })
        let fromRules = Self.names(
            in: rules.split(separator: "\n").filter { !$0.trimmingCharacters(in: .whitespaces).hasPrefix("#") }
                .joined(separator: "\n"))
        let fromDashboard = Self.names(in: expressions.joined(separator: "\n"))
        #expect(fromDashboard.recorded.isSubset(of: defined), "recording rules the dashboard uses but no rule defines")
        #expect(fromRules.recorded == defined)

        try await LiveStack.withDirectory { directory in
            let certificates = directory + "/tls"
            try FileManager.default.createDirectory(atPath: certificates, withIntermediateDirectories: true)
            let tls = try await StackFixture.makeCertificates(in: certificates)
            let services = ["auth", "registration", "payload", "dispatch"]
            try await LiveStack.with(
                runner: .processes,
                directory: directory,
                configure: { configuration in
                    configuration.tls = tls
                    for service in services {
                        configuration.extraArguments[service, default: []] += ["--metrics-listen", "127.0.0.1:0"]
                    }
                }
            ) { live in
                try await StackFixture.secureSequence(live)
                // Requests past the hub's rate, so that the edge's throttled counter has a series.
                try await live.setRequestRate(hub: "default", perSecond: 1, burst: 1)
                var refused = 0
                for _ in 0..<4 {
                    let reply = try await live.edge.request("GET", "/api/notifications/999", as: "alice")
                    if reply.status == 429 { refused += 1 }
                }
                #expect(refused >= 2, "four requests at once against a burst of one")
                func scrape(_ service: String) async throws -> String {
                    let file = "\(live.configuration.runtimeDirectory)/\(service).metrics.url"
                    let url = try String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(
                        in: .whitespacesAndNewlines)
                    return try await EdgeClient(base: URL(string: url)!.deletingLastPathComponent()).request(
                        "GET", "metrics"
                    ).text
                }
                // The send's counters are written after the inbox row the sequence waited for: poll.
                var exported = Set<String>()
                let needed = fromRules.metrics.union(fromDashboard.metrics)
                let deadline = ContinuousClock.now + .seconds(30)
                repeat {
                    exported = Self.sampleNames(try await live.edge.request("GET", "/metrics").text)
                    for service in services { exported.formUnion(Self.sampleNames(try await scrape(service))) }
                    if needed.isSubset(of: exported) { break }
                    try await Task.sleep(for: .milliseconds(200))
                } while ContinuousClock.now < deadline
                #expect(
                    needed.subtracting(exported).isEmpty,
                    "used by the rules or the dashboard, exported by no service: \(needed.subtracting(exported).sorted())"
                )
                print(
                    "monitoring: \(needed.count) series used, all exported: \(needed.sorted().joined(separator: ", "))")
            }
        }
    }
}
