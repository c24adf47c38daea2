import Foundation
import Logging
import Metrics

#if canImport(Glibc)
    import Glibc
#endif

/// `herald_data_disk_free_bytes` and `herald_data_disk_free_ratio`: the space left on the
/// filesystem of a service's SQLite file, for users other than root (statvfs `f_bavail`), sampled
/// every `interval` by a ``Periodic``. A full disk makes writes answer 507; the alert on the
/// ratio comes first. (On PostgreSQL the server's disk is the database's operators' to watch.)
enum DiskSpaceGauge {
    static func service(databasePath: String, interval: Duration = .seconds(15)) -> Periodic {
        let folder = URL(fileURLWithPath: databasePath).deletingLastPathComponent().path
        return Periodic("disk space gauge", every: interval, logger: Logger(label: "herald-disk")) {
            guard let sample = sample(folder) else { return }
            // Looked up when run, after the process bootstrapped its metrics.
            Gauge(label: "herald_data_disk_free_bytes").record(sample.free)
            Gauge(label: "herald_data_disk_free_ratio").record(sample.ratio)
        }
    }

    /// Free bytes and the free share of the filesystem holding `folder`; nil when statvfs fails.
    static func sample(_ folder: String) -> (free: Double, ratio: Double)? {
        var stats = statvfs()
        guard statvfs(folder, &stats) == 0, stats.f_blocks > 0 else { return nil }
        let free = Double(stats.f_bavail) * Double(stats.f_frsize)
        return (free, Double(stats.f_bavail) / Double(stats.f_blocks))
    }
}
