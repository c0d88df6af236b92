import ArgumentParser
import Foundation
import Values
import PoopyPalsData

struct Devices: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Find devices: the database holds keys of device ids, never the ids.",
        subcommands: [Key.self]
    )
}

extension Devices {
    struct Key: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print the key under which the database stores a device id (devices.id, poop_logs.device_id).",
            discussion: """
                For support: a person gives their device id; this prints the key to look for. Needs no database. \\
                The id is a credential: pass it on standard input (`-`) rather than on a shared machine's command line.
                """)

        @Argument(help: "The device id (a UUID), or - to read it from standard input.")
        var id: String

        func run() throws {
            var raw = id
            if raw == "-" { raw = (readLine(strippingNewline: true) ?? "").trimmingCharacters(in: .whitespaces) }
            guard let uuid = UUIDText.parse(raw), let device = try? DeviceID(uuid) else {
                throw ValidationError("the device id must be a UUID (and not the nil UUID)")
            }
            print(device.key.uuidString.lowercased())
        }
    }
}
