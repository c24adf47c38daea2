import Foundation
import Metrics
public import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#endif

/// `herald_data_disk_free_bytes` and `herald_data_disk_free_ratio`: the space left on the
/// filesystem of a service's SQLite file, for users other than root (statvfs `f_bavail`), sampled
/// every `interval`. A full disk makes writes answer 507; the alert on the ratio comes first.
/// (On PostgreSQL the server's disk is the database's operators' to watch.)
public struct DiskSpaceGauge: Service {
    let folder: String
    let interval: Duration

    public init(databasePath: String, interval: Duration = .seconds(15)) {
        folder = URL(fileURLWithPath: databasePath).deletingLastPathComponent().path
        self.interval = interval
    }

    /// Free bytes and the free share of the filesystem holding `folder`; nil when statvfs fails.
    static func sample(_ folder: String) -> (free: Double, ratio: Double)? {
        var stats = statvfs()
        guard statvfs(folder, &stats) == 0, stats.f_blocks > 0 else { return nil }
        let free = Double(stats.f_bavail) * Double(stats.f_frsize)
        return (free, Double(stats.f_bavail) / Double(stats.f_blocks))
    }

    public func run() async throws {
        let bytes = Gauge(label: "herald_data_disk_free_bytes")
        let ratio = Gauge(label: "herald_data_disk_free_ratio")
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                if let sample = Self.sample(folder) {
                    bytes.record(sample.free)
                    ratio.record(sample.ratio)
                }
                do { try await Task.sleep(for: interval) } catch { return }
            }
        }
    }
}
