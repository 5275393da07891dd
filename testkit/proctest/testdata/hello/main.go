// Command hello is what the Builder tests build.
package main

import "fmt"

func main() { fmt.Println("hello") }
