/// Limits both transports share.
public enum RPCLimits {
    /// The largest request or response message: 16 MiB (gRPC's default would be 4 MiB).
    public static let maxMessageBytes = 16 << 20
}
