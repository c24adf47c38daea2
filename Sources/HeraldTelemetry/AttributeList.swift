public import Tracing

/// A recorded span's attributes, in the order they were first set.
///
/// A span carries a handful (the edge's server span about ten), so a list searched by key costs
/// less than `SpanAttributes`, a dictionary: that hashed every key on every set and grew its storage
/// several times per span. Callgrind put the hashing and the growth at about 8k instructions of a
/// sampled GET in herald-edge. The subscript takes what `SpanAttributes`' does, so code written for
/// one reads the same with the other.
public struct AttributeList: Sendable {
    public private(set) var pairs: [(key: String, value: SpanAttribute)] = []

    public init() {}

    /// The same attributes as `attributes`.
    public init(_ attributes: SpanAttributes) {
        // swift-format-ignore: ReplaceForEachWithForLoop
        attributes.forEach { key, value in pairs.append((key, value)) }
    }

    public var isEmpty: Bool { pairs.isEmpty }
    public var count: Int { pairs.count }

    /// The attribute named `key`; setting nil removes it, as with `SpanAttributes`.
    public subscript(key: String) -> (any SpanAttributeConvertible)? {
        get { value(of: key) }
        set { set(key, newValue?.toSpanAttribute()) }
    }

    public func value(of key: String) -> SpanAttribute? {
        for pair in pairs where pair.key == key { return pair.value }
        return nil
    }

    /// Sets (or, with nil, removes) the attribute named `key`.
    public mutating func set(_ key: String, _ value: SpanAttribute?) {
        let index = pairs.firstIndex { $0.key == key }
        switch (index, value) {
        case (let index?, let value?): pairs[index].value = value
        case (let index?, nil): pairs.remove(at: index)
        case (nil, let value?):
            // Room for a server span's attributes at once: one allocation, no growth.
            if pairs.capacity == 0 { pairs.reserveCapacity(12) }
            pairs.append((key, value))
        case (nil, nil): break
        }
    }

    /// The same attributes as `SpanAttributes` (the `Span` protocol's type).
    public var spanAttributes: SpanAttributes {
        var attributes = SpanAttributes()
        for (key, value) in pairs { attributes[key] = value }
        return attributes
    }
}
