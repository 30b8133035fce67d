# Trace formats: the CLI test runs the built CLI.
if(TIO_BUILD_TESTS AND TIO_BUILD_CLI AND TARGET test_cli_trace)
    add_dependencies(test_cli_trace teraio_cli)
endif()
