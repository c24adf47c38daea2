import Foundation
import FuzzTargets
import HeraldTestSupport
import Testing

/// Every seed of Tests/FuzzCorpus through its fuzz target, uninstrumented, in the ordinary test
/// run: the inputs that once crashed a target (kept as seeds) and one per route, message and
/// format stay regression tests on every CI run. Fuzzing proper (libFuzzer's mutations under
/// AddressSanitizer) is `scripts/fuzz.sh`.
///
/// A property that does not hold traps, as under libFuzzer: the test process dies with the
/// property's message, file and line; `scripts/fuzz.sh TARGET` then names the input.
@Suite("fuzz corpus replay", .watchedForStalls)
struct FuzzCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("FuzzCorpus")

    @Test("every seed runs through its target and every property holds", arguments: FuzzTarget.allCases)
    func replay(_ target: FuzzTarget) async throws {
        let folder = Self.corpus.appendingPathComponent(target.rawValue)
        let files = try FileManager.default.contentsOfDirectory(at: folder, includingPropertiesForKeys: nil)
            .filter { !$0.lastPathComponent.hasPrefix(".") }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        #expect(!files.isEmpty, "no seeds in \(folder.path)")
        let inputs = try files.map { try [UInt8](Data(contentsOf: $0)) }
        print("fuzz corpus replay: \(target.rawValue), \(inputs.count) seeds")
        // On a thread of its own: the router and tagexpr targets wait on a semaphore for a task,
        // which must not hold one of the cooperative pool's few threads while it waits.
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let thread = Thread {
                for input in inputs { target.run(input) }
                done.resume()
            }
            thread.stackSize = 8 << 20
            thread.start()
        }
    }
}
