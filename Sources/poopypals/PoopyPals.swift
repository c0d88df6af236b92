import ArgumentParser

@main
struct PoopyPals: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "poopypals",
        abstract: "The PoopyPals data layer: the HTTP service, migrations and operations on its PostgreSQL database.",
        subcommands: [Migrate.self, Monitor.self, Users.self, Devices.self, Maintenance.self, Serve.self, DevToken.self]
    )
}
