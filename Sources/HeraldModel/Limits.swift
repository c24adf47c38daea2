/// Bounds on stored content that more than one service checks.
public enum ContentLimits {
    /// The longest lifetime content may be stored with: one year. herald-payload refuses longer
    /// (`ttl_seconds`), so expiry arithmetic in Unix milliseconds can never overflow.
    public static let maxTTLSeconds: Int64 = 365 * 24 * 3600
}

/// Bounds on a push that the edge and dispatch both apply.
public enum PushLimits {
    /// The longest a push is kept for delivery: 28 days, FCM's and Web Push's own maximum. An
    /// expiry further ahead (`apns-expiration`, a template's `expiry`) is read as this.
    public static let maxTTLSeconds: Int64 = 28 * 86400
}

/// A hub's API request rate, as herald-auth stores it and the edge enforces it: a
/// token bucket of `burst` requests (one second's worth when 0), refilled at `perSecond`.
public struct RequestRate: Sendable, Equatable {
    /// The largest rate and burst one may set: a million requests a second is past what one edge
    /// serves, and keeps the bucket's arithmetic far from overflow.
    public static let maxPerSecond: Int64 = 1_000_000
    /// 0: no limit.
    public var perSecond: Int64
    public var burst: Int64

    public init(perSecond: Int64 = 0, burst: Int64 = 0) {
        self.perSecond = perSecond
        self.burst = burst
    }
}

/// The bounds on a hub's limits, which herald-auth (installations, request rate) and
/// herald-dispatch (push quotas, weight) each check for their part, and which a change spanning
/// both is checked against whole before either writes (``HubLimitBounds/check(_:)``).
public enum HubLimitBounds {
    /// A hub's largest share of the fair claims (1, the default, to 100).
    public static let maxWeight: Int64 = 100

    /// INVALID_ARGUMENT naming the first value out of bounds; nil fields are unchanged.
    public static func check(
        maxInstallations: Int64? = nil, requestsPerSecond: Int64? = nil, requestBurst: Int64? = nil,
        pushesPerDay: Int64? = nil, pushesPerMonth: Int64? = nil, maxConcurrentPushes: Int64? = nil,
        weight: Int64? = nil
    ) throws {
        let counts: [(String, Int64?)] = [
            ("maxInstallations", maxInstallations), ("requestsPerSecond", requestsPerSecond),
            ("requestBurst", requestBurst), ("pushesPerDay", pushesPerDay), ("pushesPerMonth", pushesPerMonth),
            ("maxConcurrentPushes", maxConcurrentPushes),
        ]
        for (name, value) in counts where (value ?? 0) < 0 {
            throw ServiceError.invalidArgument("\(name) must not be negative (0: no limit)")
        }
        for (name, value) in [("requestsPerSecond", requestsPerSecond), ("requestBurst", requestBurst)]
        where (value ?? 0) > RequestRate.maxPerSecond {
            throw ServiceError.invalidArgument("\(name) must be at most \(RequestRate.maxPerSecond)")
        }
        if let weight, !(0...maxWeight).contains(weight) {
            throw ServiceError.invalidArgument("weight must be 1 to \(maxWeight) (0: the default, 1)")
        }
    }
}

/// Bounds on a person's data export (`herald users export`) that herald-dispatch and the CLI share.
public enum ExportLimits {
    /// The most devices one ExportDeviceRecords names. Dispatch finds their records by scanning its
    /// tables (no index on registration id, which every send would pay for), once per call: the
    /// more devices a call names, the fewer scans an export takes (100,000 devices: 20, not 200
    /// with pages of 500). But every page of their records names them all again, so past a few
    /// thousand a call costs more than the scans it saves (docs/operations.md has the figures).
    /// Only registration ids are sent, at most 256 bytes each: 1.3 MB at most.
    public static let devicesPerCall = 5_000
}
