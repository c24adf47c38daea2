/// Bounds on stored content that more than one service checks.
public enum ContentLimits {
    /// The longest lifetime content may be stored with: one year. herald-payload refuses longer
    /// (`ttl_seconds`), so expiry arithmetic in Unix milliseconds can never overflow.
    public static let maxTTLSeconds: Int64 = 365 * 24 * 3600
}
