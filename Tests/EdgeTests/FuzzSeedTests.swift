import Foundation
import HeraldTestSupport
import Testing

@testable import EdgeTestSupport

/// herald-fuzz's `router` target starts from one seed per route (Tests/FuzzCorpus/router, written
/// by scripts/make_fuzz_seeds.py): a route without a seed is fuzzed only by chance.
@Suite("the router fuzzer's seeds", .watchedForStalls)
struct FuzzSeedTests {
    static let corpus = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("FuzzCorpus/router")

    /// A seed's method and path segments, read as herald-fuzz reads it: "GET /app1/registrations?x"
    /// → ("GET", ["app1", "registrations"]); nil when the fuzzer would drop it.
    static func requestLine(_ seed: Data) -> (method: String, segments: [Substring])? {
        guard let (head, _) = FuzzHTTPRequest.parse([UInt8](seed)), let target = head.path else { return nil }
        let path = target.prefix { $0 != "?" }
        return (
            head.method.rawValue, path.split(separator: "/", omittingEmptySubsequences: false).dropFirst().map { $0 }
        )
    }

    /// Whether a route as Hummingbird prints it ("GET /{hub}/installations/{id}") serves the seed.
    static func serves(_ route: String, _ seed: (method: String, segments: [Substring])) -> Bool {
        let parts = route.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0] == seed.method else { return false }
        let pattern = parts[1].split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        return pattern.count == seed.segments.count
            && zip(pattern, seed.segments).allSatisfy { want, have in
                want.hasPrefix("{") ? !have.isEmpty : want == have
            }
    }

    @Test("every route of the router has a seed in Tests/FuzzCorpus/router")
    func everyRouteHasASeed() throws {
        let files = try FileManager.default.contentsOfDirectory(at: Self.corpus, includingPropertiesForKeys: nil)
        let seeds = try files.compactMap { Self.requestLine(try Data(contentsOf: $0)) }
        #expect(seeds.count == files.count, "a seed the fuzzer cannot read as a request")
        let routes = try RouteRightsTests.router().routes.map(\.description)
        let unseeded = routes.filter { route in !seeds.contains { Self.serves(route, $0) } }
        #expect(unseeded == [], "routes without a seed: add them to scripts/make_fuzz_seeds.py")
    }

    @Test("the matching itself: a template segment takes any non-empty segment, literals only themselves")
    func matching() throws {
        let seed = try #require(Self.requestLine(Data("GET /app1/installations/i1?x=1\r\n\r\n".utf8)))
        #expect(Self.serves("GET /{hub}/installations/{id}", seed))
        #expect(!Self.serves("GET /{hub}/installations", seed))
        #expect(!Self.serves("DELETE /{hub}/installations/{id}", seed))
        #expect(!Self.serves("GET /{hub}/Installations/{id}", seed))
    }
}
