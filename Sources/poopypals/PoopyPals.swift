import ArgumentParser

@main
struct PoopyPals: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "poopypals",
        abstract: "The PoopyPals data layer: migrations and operations on its PostgreSQL database.",
        subcommands: [Migrate.self, Monitor.self, Users.self]
    )
}
