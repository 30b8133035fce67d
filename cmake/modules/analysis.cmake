# The analysis CLI test runs the teraio executable: build it first.
if(TIO_BUILD_TESTS AND TIO_BUILD_CLI AND TARGET test_analysis_cli)
    add_dependencies(test_analysis_cli teraio_cli)
endif()
