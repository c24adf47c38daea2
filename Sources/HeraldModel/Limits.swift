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

/// A hub's API request rate (issue 49), as herald-auth stores it and the edge enforces it: a
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
