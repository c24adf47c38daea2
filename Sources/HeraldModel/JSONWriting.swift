import Foundation

/// `JSONSerialization.data(withJSONObject:options:)` that cannot trap.
///
/// Foundation's writer does not throw when the top-level object is neither an array nor a
/// dictionary: it stops the process ("Top-level object was not NSArray or NSDictionary"), which
/// from a request path kills every request in flight (the console's preview of a
/// template body `1` did). Here `.fragmentsAllowed` is always set, so a bare string or number is
/// written as itself, and a value JSON cannot hold (NaN, a date) is a thrown error, never a trap.
/// `scripts/trap-check.sh` flags every other use of `withJSONObject` in Sources/.
public func jsonData(_ object: Any, options: JSONSerialization.WritingOptions = []) throws -> Data {
    // trap-ok: .fragmentsAllowed turns off the writer's only trap (a top-level fragment)
    try JSONSerialization.data(withJSONObject: object, options: options.union(.fragmentsAllowed))
}

/// One JSON object written a member at a time, for items written by the hundred thousand (the
/// delivery records and inbox entries of `herald users export`). `JSONEncoder` builds a tree of
/// containers, sorts its keys and walks it again for every item: about 6 µs an item, a fifth of
/// herald-dispatch's CPU in an export. Here each member is copied once. Members go out in the
/// order they are written: a caller writes them sorted, as `JSONEncoder`'s `.sortedKeys` would.
public struct JSONObjectWriter: Sendable {
    private var bytes: [UInt8] = [UInt8(ascii: "{")]

    public init() {}

    private mutating func key(_ key: String) {
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        bytes += jsonStringLiteral(key).utf8
        bytes.append(UInt8(ascii: ":"))
    }

    public mutating func member(_ key: String, _ value: String) {
        self.key(key)
        bytes += jsonStringLiteral(value).utf8
    }

    public mutating func member(_ key: String, _ value: Int64) {
        self.key(key)
        bytes += String(value).utf8
    }

    /// An object of strings, its keys sorted.
    public mutating func member(_ key: String, _ object: [String: String]) {
        self.key(key)
        var inner = JSONObjectWriter()
        for (name, value) in object.sorted(by: { $0.key < $1.key }) { inner.member(name, value) }
        bytes += inner.finished
    }

    /// The object, closed.
    public var finished: [UInt8] { bytes + [UInt8(ascii: "}")] }
}
