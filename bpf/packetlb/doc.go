// Package packetlb is placeholder
package packetlb
