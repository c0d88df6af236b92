/// The export up to its logs: `{"device":…,"profile":…,"logs":[`. The logs follow in batches, and `]}` ends it.
/// No profile: no key (a generated client cannot decode a nullable reference).
struct ExportHead: JSONWritable {
    let device: DeviceBody
    /// Only for a token of the profile's subject.
    let profile: UserBody?
    /// Whether the device is linked to a profile, said whether or not its fields are given.
    let profileLinked: Bool

    func write(to output: inout JSONOutput) throws {
        output.raw(#"{"device":"#)
        try device.write(to: &output)
        if let profile {
            output.raw(#","profile":"#)
            try profile.write(to: &output)
        }
        output.raw(#","profileLinked":"#)
        output.bool(profileLinked)
        output.raw(#","logs":["#)
    }
}
