import ArgumentParser
import AsyncHTTPClient
import Foundation
import HeraldModel
import HeraldProto
import HeraldRPC
import HeraldService
import HeraldStack
import NIOCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Instructions of a template send's CPU steps in herald-dispatch, next to a native send's: each the
/// difference of two whole runs of `herald-bench template-loop` under callgrind, so start-up and
/// exit cancel out.
struct TemplateCounts {
    var render: Double
    var nativeRender: Double
    /// Per device.
    var device: Double
    var nativeDevice: Double

    init(counter: Callgrind, bin: String, quick: Bool) throws {
        let renders = quick ? 50 : 400
        let devices = quick ? 5_000 : 50_000
        func count(native: Bool) throws -> (render: Double, device: Double) {
            func run(_ renders: Int, _ devices: Int) throws -> Double {
                try counter.total(
                    bin + "/herald-bench",
                    ["template-loop", "--renders", String(renders), "--devices", String(devices)]
                        + (native ? ["--native"] : []))
            }
            // Warmed by a first rendering and a first page in all three runs.
            let base = try run(1, 1000)
            return (
                (try run(1 + renders, 1000) - base) / Double(renders),
                (try run(1, 1000 + devices) - base) / Double(devices)
            )
        }
        (render, device) = try count(native: false)
        (nativeRender, nativeDevice) = try count(native: true)
    }
}
