public import Tracing

/// A recorded span's attributes, in the order they were first set.
///
/// A span carries a handful (the edge's server span about ten), so a list searched by key costs
/// less than `SpanAttributes`, a dictionary: that hashed every key on every set and grew its storage
/// several times per span. Callgrind put the hashing and the growth at about 8k instructions of a
/// sampled GET in herald-edge. The subscript takes what `SpanAttributes`' does, so code written for
/// one reads the same with the other.
public struct AttributeList: Sendable {
    /// The names and values, in two arrays: a search compares names only, and no (name, value) pair
    /// is copied through the runtime's generic tuple witnesses.
    public private(set) var keys: [String] = []
    public private(set) var values: [SpanAttribute] = []

    public init() {}

    /// The same attributes as `attributes`.
    public init(_ attributes: SpanAttributes) {
        // swift-format-ignore: ReplaceForEachWithForLoop
        attributes.forEach { key, value in
            keys.append(key)
            values.append(value)
        }
    }

    public var isEmpty: Bool { keys.isEmpty }
    public var count: Int { keys.count }

    /// The attribute named `key`; setting nil removes it, as with `SpanAttributes`.
    public subscript(key: String) -> (any SpanAttributeConvertible)? {
        get { value(of: key) }
        set { set(key, newValue?.toSpanAttribute()) }
    }

    public func value(of key: String) -> SpanAttribute? {
        keys.firstIndex(of: key).map { values[$0] }
    }

    /// Sets (or, with nil, removes) the attribute named `key`.
    public mutating func set(_ key: String, _ value: SpanAttribute?) {
        switch (keys.firstIndex(of: key), value) {
        case (let index?, let value?): values[index] = value
        case (let index?, nil):
            keys.remove(at: index)
            values.remove(at: index)
        case (nil, let value?):
            // Room for a server span's attributes at once: one allocation each, no growth.
            if keys.capacity == 0 {
                keys.reserveCapacity(12)
                values.reserveCapacity(12)
            }
            keys.append(key)
            values.append(value)
        case (nil, nil): break
        }
    }

    /// The same attributes as `SpanAttributes` (the `Span` protocol's type).
    public var spanAttributes: SpanAttributes {
        var attributes = SpanAttributes()
        for (key, value) in zip(keys, values) { attributes[key] = value }
        return attributes
    }
}
