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
