fn main() {
    std::process::exit(storefs::cli::main());
}
