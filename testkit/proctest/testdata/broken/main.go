// Command broken does not compile: the Builder tests check that its
// compiler error reaches the test.
package main

func main() { undefinedFunction() }
