import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldStack
import HeraldTestSupport
import StackTestSupport
import Testing

/// What a hostile client can make herald-auth hold, read from that one process's resident memory.
@Suite("NH API against a hostile client: herald-auth's memory", .serialized, .timeLimit(.minutes(3)), .watchedForStalls)
struct AuthMemoryTests {
    // What could grow is herald-auth's verdict cache and the gate's ledger, in memory on either store.
    @Test("600 tokens with 60 KB key names do not grow herald-auth", .storeIndependent)
    func longKeyNamesDoNotGrowAuth() async throws {
        try await LiveStack.with(runner: .processes) { live in
            _ = try await NHFixture.hub("probe", live)
            let pid = try #require(try await live.stack.pid(of: "auth"))
            let root = NHFixture.root(live)
            let expiry = Int64(Date().timeIntervalSince1970) + 600
            // Warm up the paths first, so the baseline includes what any traffic allocates once.
            for n in 0..<50 {
                let token = SASTokens.token(sr: root, keyName: "k\(n)", key: "x", expiry: expiry)
                _ = try await live.edge.request("GET", "/probe/installations/x", authorization: token)
            }
            let before = Self.rss(pid)
            // 600 (36 MB of key names, which the old ledger kept whole) in 8 streams: the issue's
            // 1,500 one by one outlasted the suite's time limit on CI's loaded machine.
            try await withThrowingTaskGroup(of: Int.self) { group in
                for stream in 0..<8 {
                    group.addTask {
                        var last = 0
                        for n in stride(from: stream, to: 600, by: 8) {
                            let name = String(repeating: "k", count: 60_000) + "\(n)"
                            let token = SASTokens.token(sr: root, keyName: name, key: "x", expiry: expiry)
                            last = try await live.edge.request("GET", "/probe/installations/x", authorization: token)
                                .status
                        }
                        return last
                    }
                }
                for try await status in group { #expect([401, 429].contains(status), "\(status)") }
            }
            let after = Self.rss(pid)
            print("herald-auth RSS: \(before) MB before, \(after) MB after 600 tokens with 60 KB key names")
            #expect(after - before < 10, "herald-auth grew from \(before) to \(after) MB")
        }
    }

    /// Resident set size of a process in MB, from /proc.
    static func rss(_ pid: Int32) -> Double {
        let status = (try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") } ?? ""
        return Double(line.split(separator: " ").dropFirst().first ?? "0").map { $0 / 1024 } ?? 0
    }
}
